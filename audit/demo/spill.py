"""Scratch storage that keeps a large simulation's memory flat: event bodies on disk.

A month of a million deliveries has about 600,000 event bodies; :class:`Bodies` keeps them in
one scratch file and hands out a reference (an ``int``) to read each one back.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Bodies"]

_LENGTH = 1 << 32  # a reference is offset * _LENGTH + length


class Bodies:
    """Texts appended to a scratch file at ``path``, read back by the reference :meth:`add`
    returned (the file is removed with its folder by the caller).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     bodies = Bodies(Path(folder, "bodies"))
    ...     refs = [bodies.add(t) for t in ("{}", '{"a":"é🔒"}')]
    ...     print(bodies.get(refs[1]), bodies.get(refs[0]))
    ...     bodies.close()
    {"a":"é🔒"} {}
    """

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w+b", buffering=1 << 16)  # noqa: SIM115 (closed by close())
        self._end = 0
        self._dirty = False

    def add(self, text: str) -> int:
        """Store ``text``; return its reference."""
        data = text.encode("utf-8")
        self._file.write(data)
        ref = self._end * _LENGTH + len(data)
        self._end += len(data)
        self._dirty = True
        return ref

    def get(self, ref: int) -> str:
        """The text stored under ``ref``."""
        if self._dirty:
            self._file.flush()
            self._dirty = False
        offset, length = divmod(ref, _LENGTH)
        return os.pread(self._file.fileno(), length, offset).decode("utf-8")

    def close(self) -> None:
        self._file.close()
