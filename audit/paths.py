"""Turn the paths a user gives (files, folders, globs) into the files to read: the one expander.

Capture logs (:func:`audit.ingest.load.expand_paths`) and listing snapshots
(:func:`audit.analysis.subscriptions.snapshot_files`) are both found here; each caller names the
suffixes its folders yield. The rules (stated for users in ``docs/formats.md``, "Which files are
read"):

* A file named on the command line is read whatever its name.
* A folder is searched recursively for names ending in one of the caller's suffixes (capture
  logs: those of :data:`audit.ingest.formats.FORMATS`), optionally followed by a logrotate
  suffix (``.1``, ``.2``, ... or a dateext ``-YYYYMMDD[HH]``) and then optionally ``.gz``:
  ``x.jsonl``, ``x.jsonl.1``, ``x.jsonl.2.gz``, ``x.har-20261001.gz``. Hidden files and folders
  (``.name``) are skipped.
* Symbolic links are followed, but a folder is entered once only (by device and inode), so a
  symlink loop ends the walk instead of repeating it; ``**`` in a glob uses the same walk.
* Other files in a searched folder (``.json``, ``.log``...), dangling symlinks and symlink loops
  are listed in ONE warning (:class:`PathWarning`), never silently skipped.
* A glob's matches that are not regular files (FIFOs, devices, sockets), dangling symlinks and
  symlink loops are listed in that warning too.
* A path named on the command line that is not a regular file or a folder (a FIFO, a device, a
  symlink to one) is an error: "PATH: not a regular file".
* A folder or file that matches but cannot be read (no permission, I/O error) is an error naming
  it (:class:`~audit.errors.InputError`), never a silent skip.

Small files the user names (``--secrets``, ``--params``, ``--mutes``, the snapshots) are read by
:func:`read_regular`: a regular file only (never a FIFO that would block or a device without
end), at most :data:`MAX_SMALL_FILE_BYTES`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from audit.errors import InputError
from audit.redaction import for_terminal

__all__ = [
    "MAX_SMALL_FILE_BYTES",
    "PathWarning",
    "expand",
    "local_folder",
    "name_pattern",
    "read_regular",
    "resolved_name",
    "source_name",
]

_MAGIC = re.compile(r"[*?[]")
#: At most this many names are spelled out in the skipped-files warning.
_SHOWN = 20


#: The most bytes :func:`read_regular` reads by default: a secrets, parameters or mutes file holds
#: a few entries (16 MiB is hundreds of thousands of them); a larger one is a wrong path.
MAX_SMALL_FILE_BYTES = 16 * 2**20

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def read_regular(
    path: str | os.PathLike,
    *,
    limit: int | None = MAX_SMALL_FILE_BYTES,
    what: str = "file",
    error: type[Exception] = InputError,
) -> bytes:
    """The bytes of the regular file ``path`` (symbolic links followed), at most ``limit``.

    Anything else (a FIFO, which would block; a device such as ``/dev/zero``, which has no end;
    a folder; a socket) raises ``error("PATH: not a regular file")`` before a byte is read: the
    path is checked, then opened without blocking and checked again. A file larger than
    ``limit`` raises ``error`` naming the limit (``what`` names the file in it). Other
    :class:`OSError` (not found, no permission) propagate, for the caller to word.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise error(f"{path}: not a regular file")
    with os.fdopen(os.open(path, _READ_FLAGS), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the first look
            raise error(f"{path}: not a regular file")
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{path}: {what} larger than {_size(limit)}; is this the right file?")
    return data


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


class PathWarning(UserWarning):
    """Files in a searched folder or matched by a glob were not read (other names, FIFOs and
    devices, dangling links, loops); ``skipped`` lists each as ``"<path> (<reason>)"``."""

    def __init__(self, message: str, skipped: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.skipped = list(skipped)


def source_name(path: str | os.PathLike) -> str:
    """A path as the ``source`` column, messages and manifests give it: UTF-8 text, a byte of a
    name that is not UTF-8 (a Latin-1 system's ``café``) written ``\\xe9``. ``str(path)`` held
    it as a lone surrogate, which no Arrow column, JSON file or UTF-8 output can hold.

    >>> source_name(os.fsdecode(b"logs/caf\\xe9.jsonl")), source_name("logs/café.jsonl")
    ('logs/caf\\\\xe9.jsonl', 'logs/café.jsonl')
    """
    text = os.fspath(path)
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    if text.isascii():
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file system decoding made: shown escaped
        raw = text.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


def resolved_name(path: str | os.PathLike[str]) -> str:
    """:func:`source_name` of ``path`` resolved (absolute, symbolic links followed): a capture
    log's name in rows and per-file counts, from raw captures as in an evidence store's
    manifest, however it was typed (``logs/x.jsonl`` or ``/srv/logs/x.jsonl``)."""
    return source_name(Path(path).resolve())


def name_pattern(suffixes: Iterable[str]) -> re.Pattern[str]:
    """The file names a folder search picks up (case-insensitive): suffix, rotation, ``.gz``.

    >>> p = name_pattern(["jsonl", "har"])
    >>> [bool(p.fullmatch(n)) for n in ("x.har.2.gz", "x.JSONL-20261001", "x.json", "x.jsonl.")]
    [True, True, False, False]
    >>> bool(p.fullmatch("new\\nline.jsonl"))  # any character in a name, a newline too
    True
    """
    alternatives = "|".join(re.escape(s.lstrip(".")) for s in suffixes)
    return re.compile(
        rf".+\.({alternatives})(\.[0-9]+|-[0-9]{{8,10}})?(\.gz)?", re.IGNORECASE | re.DOTALL
    )


class _Walk:
    """A loop-safe recursive folder walk that records what it skipped."""

    def __init__(self, recursive: bool = True) -> None:
        self.recursive = recursive
        self.skipped: list[str] = []
        self._entered: set[tuple[int, int]] = set()

    def files(self, root: Path) -> list[Path]:
        """Every non-hidden file under ``root`` (symlinks followed, each folder once)."""
        out: list[Path] = []
        self._enter(root, out)
        return out

    def _enter(self, folder: Path, out: list[Path]) -> None:
        try:
            st = folder.stat()
        except OSError as e:
            raise _unreadable(folder, e) from None
        key = (st.st_dev, st.st_ino)
        if key in self._entered:
            self.skipped.append(f"{folder} (symlink loop or folder already searched)")
            return
        self._entered.add(key)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            raise _unreadable(folder, e) from None
        for entry in entries:
            path = Path(entry.path)
            if entry.name.startswith("."):
                self.skipped.append(f"{path} (hidden)")
                continue
            try:
                st = entry.stat()  # follows symlinks
            except FileNotFoundError:
                self.skipped.append(f"{path} (dangling symlink)")
                continue
            except OSError as e:
                if e.errno == 40:  # ELOOP: a link that points at itself
                    self.skipped.append(f"{path} (symlink loop)")
                    continue
                raise _unreadable(path, e) from None
            if stat.S_ISDIR(st.st_mode):
                if self.recursive:
                    self._enter(path, out)
            elif stat.S_ISREG(st.st_mode):
                out.append(path)
            else:
                self.skipped.append(f"{path} (not a regular file)")


def _is(path: Path, kind: Callable[[int], bool], skipped: list[str] | None = None) -> bool:
    """Whether ``path`` exists as ``kind`` (links followed); a refused look is an error.

    With ``skipped``, a path that is none of a regular file, a folder and nothing (a FIFO, a
    device, a dangling symlink, a symlink loop) is noted there, as the folder walk does."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        if skipped is not None and path.is_symlink():
            skipped.append(f"{path} (dangling symlink)")
        return False
    except OSError as e:
        if e.errno == 40:  # ELOOP
            if skipped is not None:
                skipped.append(f"{path} (symlink loop)")
            return False
        raise _unreadable(path, e) from None
    if skipped is not None and _other(mode):
        skipped.append(f"{path} (not a regular file)")
    return kind(mode)


def _other(mode: int) -> bool:
    """Neither a regular file nor a folder: a FIFO, a device, a socket."""
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _unreadable(path: Path, e: OSError) -> InputError:
    return InputError(f"{path}: cannot read ({e.strerror or type(e).__name__})")


def _match(pattern: list[str], parts: list[str]) -> bool:
    """Whether path components match glob components (``**`` = any number of folders)."""
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        return _match(pattern[1:], parts) or (bool(parts) and _match(pattern, parts[1:]))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _match(pattern[1:], parts[1:])


def _glob(raw: str, walk: _Walk) -> list[Path]:
    """Files matching a glob, component by component; a folder that cannot be listed is an
    error (Python's ``glob`` skips it silently); ``**`` uses the loop-safe walk."""
    parts = Path(raw).parts
    first = next(i for i, p in enumerate(parts) if _MAGIC.search(p))
    base = Path(*parts[:first]) if first else Path(".")
    if not base.is_dir():
        return []
    pattern = list(parts[first:])
    if "**" in pattern:
        found = [f for f in walk.files(base) if _match(pattern, list(f.relative_to(base).parts))]
        return sorted(found, key=str)
    current = [base]
    for i, comp in enumerate(pattern):
        last = i == len(pattern) - 1
        want = stat.S_ISREG if last else stat.S_ISDIR
        nxt: list[Path] = []
        for folder in current:
            if not _MAGIC.search(comp):
                candidates = [folder / comp]
            else:
                try:
                    with os.scandir(folder) as it:
                        names = sorted(e.name for e in it)
                except OSError as e:
                    raise _unreadable(folder, e) from None
                candidates = [
                    folder / n
                    for n in names
                    if fnmatch.fnmatchcase(n, comp) and (comp[:1] == "." or n[:1] != ".")
                ]
            nxt.extend(c for c in candidates if _is(c, want, walk.skipped if last else None))
        current = nxt
    return sorted(current, key=str)


def expand(
    paths: Iterable[str | os.PathLike],
    suffixes: Iterable[str],
    *,
    what: str = "capture log",
    empty_folder_ok: bool = False,
    recursive: bool = True,
) -> list[Path]:
    """Files named by files, folders and globs, each once (by real path), in order.

    A folder yields the files whose names end in one of ``suffixes`` (:func:`name_pattern`);
    ``what`` names them in errors. A folder that holds none is an error unless
    ``empty_folder_ok``; its subfolders are searched unless not ``recursive``. ``paths`` may be
    one path. Raises
    :class:`~audit.errors.InputError` for a path that matches nothing or cannot be read, and
    warns once (:class:`PathWarning`) about everything a folder walk skipped.
    """
    if isinstance(paths, str | os.PathLike):  # one path, not an iterable of its characters
        paths = [paths]
    suffixes = tuple(s.lstrip(".") for s in suffixes)
    names = name_pattern(suffixes)
    walk = _Walk(recursive)
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = []
            for f in walk.files(p):
                if names.fullmatch(f.name):
                    found.append(f)
                else:
                    walk.skipped.append(f"{f} (not a {what} name)")
            if not found and not empty_folder_ok:
                listed = ", ".join(f"*.{s}" for s in suffixes)
                raise InputError(f"{p}: folder holds no {what} ({listed}, rotated or .gz)")
        elif p.is_file():
            found = [p]
        elif _is(p, _other):  # a FIFO, a device, a socket, or a symlink to one
            raise InputError(f"{raw}: not a regular file")
        elif p.is_symlink():
            raise InputError(f"{raw}: dangling symbolic link or symlink loop")
        elif _MAGIC.search(str(raw)):
            found = _glob(str(raw), walk)
            if not found:
                raise InputError(f"{raw}: no {what} matches this glob")
        else:
            raise InputError(f"{raw}: no such file or folder")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    if walk.skipped:
        shown = "; ".join(walk.skipped[:_SHOWN])
        more = f"; and {len(walk.skipped) - _SHOWN} more" if len(walk.skipped) > _SHOWN else ""
        warnings.warn(
            PathWarning(
                f"{len(walk.skipped)} path(s) in the given folders or globs were not read: "
                f"{shown}{more}",
                walk.skipped,
            ),
            stacklevel=3,
        )
    return out


#: ``scheme://`` at the start of a value: a URL (``s3://``, ``gs://``, ``https://``, ``file://``).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: ``user:password@`` after a URL's scheme: never shown.
_USERINFO = re.compile(r"(?<=://).*@")


def local_folder(value: str | os.PathLike[str], label: str = "store") -> Path:
    """``value`` as a store's local folder. A URL (``s3://bucket/x``, any ``scheme://``) is
    refused in one line (InputError) before anything is touched: as a path it is the local
    folder ``./s3:/bucket/x`` (``//`` folds into ``/``). The store is local; ``docs/scale.md``
    ("Object storage") says how to publish it to a bucket. A relative folder whose first part
    holds a colon (``s3:x``) is made absolute (Arrow reads a relative ``s3:x`` as a URI).
    ``label`` names the value in the message (``--store`` on the command line)."""
    text = os.fspath(value)
    if (url := _URL.match(text)) is not None:
        shown = _USERINFO.sub("…@", text)  # s3://KEY:SECRET@bucket: credentials stay out
        raise InputError(
            f"{label} {for_terminal(shown)}: a URL ({url.group()}); the evidence store is a "
            "local folder (for object storage, ingest into a local folder, then sync it: "
            "docs/scale.md, Object storage)"
        )
    path = Path(os.fsdecode(text))
    if not path.is_absolute() and path.parts and ":" in path.parts[0]:
        return path.absolute()
    return path
