"""Capture formats: one module per format, found by file suffix in :data:`FORMATS`.

Every format module states ``NAME``, ``SUFFIXES``, ``SPLITS_AT_LINES`` and
``parse(data, source, wanted, first_line=1, overlong=None) -> Buffer`` (see
:class:`CaptureFormat`); it turns its file into records and hands each to
:func:`audit.ingest.formats.base._record`. Adding a format is one module here, its entry in
:data:`FORMATS` and its tests (``docs/contributing.md``).

>>> format_of("x.har.2.gz").NAME, format_of("x.ndjson-20261001").NAME, format_of("notes.txt").NAME
('har', 'jsonl', 'jsonl')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

from audit.ingest.formats import har, jsonl
from audit.ingest.formats.base import Buffer

__all__ = ["DEFAULT", "FORMATS", "CaptureFormat", "format_of"]


class CaptureFormat(Protocol):
    """What the loaders need of a format module."""

    NAME: str
    SUFFIXES: tuple[str, ...]
    SPLITS_AT_LINES: bool

    def parse(
        self,
        data: bytes,
        source: str,
        wanted: dict[str, str],
        first_line: int = 1,
        overlong: Mapping[int, int] | None = None,
    ) -> Buffer: ...


#: Format modules by file suffix (lower case, without the dot). A folder search picks up these
#: suffixes, rotated and ``.gz`` names too (:mod:`audit.paths`).
FORMATS: dict[str, CaptureFormat] = {s: m for m in (jsonl, har) for s in m.SUFFIXES}
#: The format of a file named outright whose name has no known suffix.
DEFAULT: CaptureFormat = jsonl

_SUFFIX = re.compile(r"\.([A-Za-z0-9]+)(?:\.[0-9]+|-[0-9]{8,10})?(?:\.gz)?$", re.IGNORECASE)


def format_of(name: str) -> CaptureFormat:
    """The format of a file by its name (rotation and ``.gz`` suffixes ignored)."""
    m = _SUFFIX.search(name)
    return FORMATS.get(m.group(1).lower(), DEFAULT) if m else DEFAULT
