"""Write a file so that readers see the old content or the new, never half of one.

Every output of the toolkit (verdicts, tables, snapshots, the secrets file) is written to a
temporary file beside its target, flushed to disk and renamed over the target. When writing
fails (a full disk, a read-only folder) the temporary file is removed, the previous file is left
as it was, and :class:`~audit.errors.OutputError` names the target.

A target that is a symbolic link is written at the link's final target (the link is kept).

A writer killed before its rename (``kill -9``, a power cut) leaves its temporary file behind;
the temporary file's name carries the writer's process id, and the next successful write of
the same target removes those whose writer is gone and that are over a minute old.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from audit.errors import OutputError

__all__ = [
    "PARQUET_GROUP_ROWS",
    "abandoned",
    "atomic_output",
    "output_error",
    "parquet_writer",
    "real_target",
    "staged_files",
    "write_arrow_parquet_atomic",
    "write_json_atomic",
    "write_parquet_atomic",
    "write_text_atomic",
]


def real_target(path: str | os.PathLike) -> Path:
    """``path`` with symbolic links resolved (a missing final target is fine)."""
    p = Path(path)
    return p.resolve() if p.is_symlink() else p


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike,
    *,
    mode: int | None = None,
    binary: bool = False,
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success fsync it and rename it over ``path``.

    ``mode`` sets the permission bits (default: those of the existing file, else 0644).

    >>> with atomic_output(tmp / "out.txt") as f:  # doctest: +SKIP
    ...     f.write("all or nothing")
    """
    target = real_target(path)
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o777
        except OSError:
            mode = 0o644
    try:
        prefix = f".{target.name}.{os.getpid()}."
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise output_error(target, e) from None
    try:
        os.fchmod(fd, mode)
        kwargs = {} if binary else {"encoding": "utf-8", "newline": newline}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OutputError:  # already said, of the file a nested write was writing
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise output_error(target, e) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sweep(target)  # written: tidy what killed writers left (never fails the write)


#: A temporary file this old whose writer is gone was left by a killed run.
_STALE_S = 60.0


def abandoned(pid: int, info: os.stat_result, now: float) -> bool:
    """Whether a temporary file or folder (``info``, from ``lstat``) written by process ``pid``
    was left by a killed writer: over a minute old, and its writer gone."""
    return now - info.st_mtime > _STALE_S and not _alive(pid)


_STAGE = ".staged."


@contextlib.contextmanager
def staged_files(out: str | os.PathLike) -> Iterator[Path]:
    """A private folder inside ``out`` to write a set of files into, moved into ``out`` together.

    Every file is written (and fsynced) in the folder first; only when the block ends without
    error is each renamed over its namesake in ``out``, one rename after the other (a kill
    between two renames is the only way to leave a mix of old and new files). When a write
    fails, the folder is removed and every previous file in ``out`` is left as it was; an
    :class:`~audit.errors.OutputError` then names the file in ``out``, not in the folder.
    The folder (``.staged.<pid>.<random>``) of a killed writer is removed by the next writer
    once it is a minute old.
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _sweep_stages(out)
        stage = Path(tempfile.mkdtemp(prefix=f"{_STAGE}{os.getpid()}.", dir=out))
    except OSError as e:
        raise output_error(out, e) from None
    try:
        try:
            yield stage
        except OutputError as e:  # said of the file in out
            raise OutputError(str(e).replace(f"{stage}{os.sep}", f"{out}{os.sep}")) from None
        for p in sorted(stage.iterdir()):
            _move(p, real_target(out / p.name))
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _move(staged: Path, target: Path) -> None:
    """Rename ``staged`` over ``target`` (keeping ``target``'s permission bits); across file
    systems (``target`` reached by a symbolic link), an atomic copy."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(staged, target.stat().st_mode & 0o777)
        os.replace(staged, target)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise output_error(target, e) from None
        with open(staged, "rb") as src, atomic_output(target, binary=True) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def _sweep_stages(out: Path) -> None:
    """Remove the staging folders in ``out`` of writers that are gone (over a minute old)."""
    if os.name != "posix":
        return
    now = time.time()
    for p in out.iterdir():
        parts = p.name[len(_STAGE) :].split(".")
        if not p.name.startswith(_STAGE) or len(parts) != 2 or not parts[0].isdigit():
            continue
        with contextlib.suppress(OSError):
            info = p.lstat()
            if stat.S_ISDIR(info.st_mode) and abandoned(int(parts[0]), info, now):
                shutil.rmtree(p)


def _sweep(target: Path) -> None:
    """Remove the temporary files of ``target`` left by writers that are gone."""
    if os.name != "posix":  # the process check below is POSIX's signal 0
        return
    head = f".{target.name}."
    try:
        left = [p for p in target.parent.iterdir() if p.name.startswith(head)]
    except OSError:
        return
    now = time.time()
    for p in left:
        parts = p.name[len(head) :].split(".")  # <pid>.<random>.tmp, the name mkstemp made
        if len(parts) != 3 or parts[2] != "tmp" or not parts[0].isdigit():
            continue
        with contextlib.suppress(OSError):
            info = p.lstat()
            if stat.S_ISREG(info.st_mode) and abandoned(int(parts[0]), info, now):
                p.unlink()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # not ours to signal, or no such number
        return True
    return True


def output_error(target: Path, e: OSError) -> OutputError:
    """The one-line error of a failed write of ``target``."""
    reason = e.strerror or type(e).__name__
    return OutputError(f"{target}: cannot write ({reason}); any previous file is left unchanged")


def write_json_atomic(path: str | os.PathLike, data: object, *, mode: int = 0o644) -> Path:
    """Write ``data`` as indented JSON beside ``path`` (with ``mode``), fsync, rename over it.

    The temporary file is removed if anything fails; the result is the file written (the
    final target when ``path`` is a symbolic link).
    """
    with atomic_output(path, mode=mode) as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return real_target(path)


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int = 0o644) -> Path:
    """Write ``text`` (UTF-8) beside ``path`` (with ``mode``), fsync, rename over it."""
    with atomic_output(path, mode=mode) as f:
        f.write(text)
    return real_target(path)


#: Rows per Parquet row group: the writer holds one group's encoded columns, not the file's.
PARQUET_GROUP_ROWS = 128 * 1024


def write_parquet_atomic(df, path: str | os.PathLike) -> Path:
    """Write a frame as one zstd-compressed Parquet file beside ``path``, then rename over it."""
    import pyarrow as pa

    return write_arrow_parquet_atomic(pa.Table.from_pandas(df, preserve_index=False), path)


def write_arrow_parquet_atomic(table, path: str | os.PathLike) -> Path:
    """Write an Arrow table as :func:`write_parquet_atomic` writes a frame (no pandas needed)."""
    with atomic_output(path, binary=True) as f:
        writer = parquet_writer(f, table.schema)
        writer.write_table(table, row_group_size=PARQUET_GROUP_ROWS)
        writer.close()
    return real_target(path)


def parquet_writer(f, schema):
    """A ``pyarrow.parquet.ParquetWriter`` into the open binary file ``f``, with the settings of
    every table file: zstd, plain encoding; write with ``row_group_size=PARQUET_GROUP_ROWS``."""
    import pyarrow.parquet as pq

    # Plain encoding: zstd packs repeated values as well as a dictionary does here, and a
    # dictionary on unique values (event ids, hashes) is built and then dropped (the 1M events
    # table: 0.73 s against 1.41 s, 94 MB against 100 MB).
    return pq.ParquetWriter(f, schema, compression="zstd", use_dictionary=False)
