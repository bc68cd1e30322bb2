"""Write a file so that readers see the old content or the new, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["write_json_atomic", "write_parquet_atomic", "write_text_atomic"]


def write_json_atomic(path: str | os.PathLike, data: object, *, mode: int = 0o644) -> Path:
    """Write ``data`` as indented JSON beside ``path`` (with ``mode``), fsync, rename over it.

    The temporary file is removed if anything fails.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int = 0o644) -> Path:
    """Write ``text`` (UTF-8) beside ``path`` (with ``mode``), fsync, rename over it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_parquet_atomic(df, path: str | os.PathLike) -> Path:
    """Write a frame as one zstd-compressed Parquet file beside ``path``, then rename over it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
