"""Turn the paths a user gives (files, folders, globs) into the capture files to read.

The rules (stated for users in ``docs/formats.md``, "Which files are read"):

* A file named on the command line is read whatever its name.
* A folder is searched recursively for capture logs: names ending in ``.jsonl``, ``.ndjson`` or
  ``.har``, optionally followed by a logrotate suffix (``.1``, ``.2``, ... or a dateext
  ``-YYYYMMDD[HH]``) and then optionally ``.gz``: ``x.jsonl``, ``x.jsonl.1``, ``x.jsonl.2.gz``,
  ``x.har-20261001.gz``. Hidden files and folders (``.name``) are skipped.
* Symbolic links are followed, but a folder is entered once only (by device and inode), so a
  symlink loop ends the walk instead of repeating it; ``**`` in a glob uses the same walk.
* Other files in a searched folder (``.json``, ``.log``...), dangling symlinks and symlink loops
  are listed in ONE warning (:class:`PathWarning`), never silently skipped.
* A folder or file that matches but cannot be read (no permission, I/O error) is an error naming
  it (:class:`~audit.errors.InputError`), never a silent skip.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

from audit.errors import InputError

__all__ = ["LOG_NAME", "PathWarning", "expand", "is_har_name"]

#: Capture log names picked up in folders (case-insensitive): format, rotation, compression.
LOG_NAME = re.compile(r".+\.(jsonl|ndjson|har)(\.[0-9]+|-[0-9]{8,10})?(\.gz)?", re.IGNORECASE)
_MAGIC = re.compile(r"[*?[]")
#: At most this many names are spelled out in the skipped-files warning.
_SHOWN = 20


class PathWarning(UserWarning):
    """Files in a searched folder were not read (other names, dangling links, loops)."""


def is_har_name(name: str) -> bool:
    """Whether a file name is a HAR capture (``.har``, rotated or gzipped).

    >>> is_har_name("x.har.2.gz"), is_har_name("x.jsonl.1")
    (True, False)
    """
    m = LOG_NAME.fullmatch(name)
    return bool(m) and m.group(1).lower() == "har"


class _Walk:
    """A loop-safe recursive folder walk that records what it skipped."""

    def __init__(self) -> None:
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
                self._enter(path, out)
            elif stat.S_ISREG(st.st_mode):
                out.append(path)
            else:
                self.skipped.append(f"{path} (not a regular file)")


def _is(path: Path, kind) -> bool:
    """Whether ``path`` exists as ``kind`` (links followed); a refused look is an error."""
    try:
        return kind(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        if e.errno == 40:  # ELOOP
            return False
        raise _unreadable(path, e) from None


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
        want = stat.S_ISREG if i == len(pattern) - 1 else stat.S_ISDIR
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
            nxt.extend(c for c in candidates if _is(c, want))
        current = nxt
    return sorted(current, key=str)


def expand(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Capture files named by files, folders and globs, each once (by real path), in order.

    Raises :class:`~audit.errors.InputError` for a path that matches nothing or cannot be read,
    and warns once (:class:`PathWarning`) about everything a folder walk skipped.
    """
    walk = _Walk()
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = []
            for f in walk.files(p):
                if LOG_NAME.fullmatch(f.name):
                    found.append(f)
                else:
                    walk.skipped.append(f"{f} (not a capture log name)")
            if not found:
                raise InputError(
                    f"{p}: folder holds no capture log (*.jsonl, *.ndjson, *.har, rotated or .gz)"
                )
        elif p.is_file():
            found = [p]
        elif p.is_symlink():
            raise InputError(f"{raw}: dangling symbolic link or symlink loop")
        elif _MAGIC.search(str(raw)):
            found = _glob(str(raw), walk)
            if not found:
                raise InputError(f"{raw}: no file matches this glob")
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
            f"{len(walk.skipped)} path(s) in the given folders were not read: {shown}{more}",
            PathWarning,
            stacklevel=3,
        )
    return out
