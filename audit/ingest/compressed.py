"""Gzip input decompressed as a stream, with an expansion limit (no gzip bomb fills memory).

A file whose first bytes are the gzip magic is inflated piece by piece (at most 1 MiB of output
per step). Two limits stop a bomb before it grows, both overridable:

* absolute: at most :data:`DEFAULT_MAX_EXPANDED_BYTES` (2 GiB) of output per file
  (``AUDIT_MAX_EXPANDED_BYTES`` or the ``max_bytes`` argument);
* ratio: once the output passes :data:`RATIO_GRACE_BYTES` (16 MiB), it may not exceed
  :data:`DEFAULT_MAX_RATIO` (200) times the compressed bytes consumed so far
  (``AUDIT_MAX_EXPANSION_RATIO`` or ``max_ratio``; 0 disables the ratio check).

Capture logs compress about 8 times (the benchmark's records, gzip -9); deflate's ceiling is
about 1032. Concatenated gzip members
are read one after another, trailing NUL padding is ignored, and anything else after the last
member, a truncated stream or an empty ``.gz`` file is a :class:`~audit.errors.LoadError`.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from audit.errors import InputError, LoadError

__all__ = [
    "DEFAULT_MAX_EXPANDED_BYTES",
    "DEFAULT_MAX_RATIO",
    "RATIO_GRACE_BYTES",
    "ExpansionLimits",
    "inflate",
    "inflate_stream",
]

DEFAULT_MAX_EXPANDED_BYTES = 2 * 2**30
DEFAULT_MAX_RATIO = 200.0
RATIO_GRACE_BYTES = 16 * 2**20
_IN_STEP = 64 * 2**10
_OUT_STEP = 2**20
GZIP_MAGIC = b"\x1f\x8b"


class ExpansionLimits:
    """The two limits, from arguments, else the environment, else the defaults."""

    def __init__(self, max_bytes: int | None = None, max_ratio: float | None = None) -> None:
        self.max_bytes = int(
            max_bytes if max_bytes is not None else _env("AUDIT_MAX_EXPANDED_BYTES", int)
        )
        self.max_ratio = float(
            max_ratio if max_ratio is not None else _env("AUDIT_MAX_EXPANSION_RATIO", float)
        )
        if self.max_bytes <= 0 or self.max_ratio < 0:
            raise InputError("expansion limits must be positive (ratio 0 disables that check)")

    def __repr__(self) -> str:
        return f"ExpansionLimits(max_bytes={self.max_bytes}, max_ratio={self.max_ratio})"


def _env(name: str, kind: type[int] | type[float]) -> float:
    default = DEFAULT_MAX_EXPANDED_BYTES if kind is int else DEFAULT_MAX_RATIO
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise InputError(f"environment variable {name} is not a number") from None


def inflate(path: Path, blob: bytes, limits: ExpansionLimits | None = None) -> bytes:
    """The content of a file: ``blob`` itself, or its gzip members inflated within ``limits``.

    ``path`` names the file in errors. A ``.gz`` name with no byte at all is an error (an
    empty log would hide a lost file).
    """
    if not blob and path.name.lower().endswith(".gz"):
        raise LoadError(f"{path}: empty file (0 bytes) named .gz: not a gzip file, not read")
    if blob[:2] != GZIP_MAGIC:
        return blob
    steps = (blob[at : at + _IN_STEP] for at in range(0, len(blob), _IN_STEP))
    return b"".join(inflate_stream(path, steps, limits))


def inflate_stream(
    path: Path, blocks: Iterable[bytes], limits: ExpansionLimits | None = None
) -> Iterator[bytes]:
    """The inflated content of gzip bytes given as ``blocks``, at most 1 MiB per piece, within
    ``limits`` (checked at every piece: a bomb stops early, memory bounded). Concatenated
    members are read in turn; NUL padding after the last one is ignored; anything else after
    it, or a truncated stream, is a :class:`~audit.errors.LoadError` naming ``path``."""
    limits = limits or ExpansionLimits()
    more = iter(blocks)
    total = consumed = 0
    d = zlib.decompressobj(wbits=31)
    data = b""
    while True:
        if not data:
            data = next(more, b"")
        try:
            out = d.decompress(data, _OUT_STEP)
        except zlib.error as e:
            raise LoadError(f"{path}: truncated or corrupt gzip file ({e})") from None
        consumed += len(data) - len(d.unconsumed_tail) - len(d.unused_data)
        if out:
            total += len(out)
            _check(path, total, consumed, limits)
            yield out
        if not d.eof:
            if not data and not out:  # no input left, nothing pending: the stream stops short
                raise LoadError(f"{path}: truncated or corrupt gzip file (unexpected end)")
            data = d.unconsumed_tail
            continue
        rest = d.unused_data  # the next member, NUL padding, or the end
        while len(rest) < 2 and (block := next(more, None)) is not None:
            rest += block
        if rest[:2] == GZIP_MAGIC:
            d, data = zlib.decompressobj(wbits=31), rest
            continue
        if rest.count(0) != len(rest) or any(b.count(0) != len(b) for b in more):
            raise LoadError(f"{path}: corrupt gzip file (data after the last member)")
        return


def _check(path: Path, total: int, consumed: int, limits: ExpansionLimits) -> None:
    if total > limits.max_bytes:
        raise LoadError(
            f"{path}: gzip expands beyond {limits.max_bytes} bytes (the absolute limit; "
            "raise it with AUDIT_MAX_EXPANDED_BYTES if the file is genuine)"
        )
    if limits.max_ratio and total > RATIO_GRACE_BYTES and total > limits.max_ratio * consumed:
        raise LoadError(
            f"{path}: gzip expands more than {limits.max_ratio:g} times (a gzip bomb?); "
            "raise the limit with AUDIT_MAX_EXPANSION_RATIO if the file is genuine"
        )
