"""The evidence store's folder: its manifest checked before it is believed, its parts
published, checked and cleaned up.

An ingest deletes the parts its manifest does not list and the parts it replaces, by the names
the manifest gives: a manifest of the wrong shape, one that lists a file or a part twice (every
record in it would count twice), a count beyond what a Parquet file can hold, or a part named
outside the dataset (``../../etc/x``, an absolute path), stops it with one line before anything
is touched. No symbolic link anywhere inside the store is followed (the manifest, ``.lock``,
``.staging``, ``deliveries``, a ``month=`` folder, a part): a link there would make an ingest
write or delete outside the store, or a reader read what the manifest does not vouch for.

Each part's sha256 and row count are in the manifest (format 2) and checked before a part is
read (:func:`check_parts`): a damaged part is one :class:`DamagedPart` error that names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from audit.errors import InputError
from audit.ingest.parts import Staged

__all__ = [
    "DATASET",
    "FORMAT",
    "MAX_COUNT",
    "PART_NAME",
    "DamagedPart",
    "check_folder",
    "check_manifest",
    "check_parts",
    "damaged_parts",
    "load_manifest",
    "part_names",
    "part_problem",
    "publish",
    "remove_strays",
    "staging_folder",
]

DATASET = "deliveries"
#: The store format this release writes (the manifest's ``version``); it reads every earlier one.
FORMAT = 2
#: The most rows or bytes a count may claim: what a Parquet file can hold (int64 counts).
MAX_COUNT = 2**63 - 1

#: How the store names its parts (``month=2026-10/part-<file sha>-<random>.parquet``).
PART_NAME = re.compile(r"month=(?:\d{4}-\d{2}|none)/part-[0-9A-Za-z_-]+\.parquet")
_SHA256 = re.compile(r"[0-9a-f]{64}")

_ENTRY = {
    "path": str,
    "sha256": str,
    "size": int,
    "records": int,
    "unreadable": int,
    "lines": int,
    "parts": list,
}
_PART = {"name": str, "sha256": str, "rows": int}


class DamagedPart(InputError):
    """A part the manifest lists is missing or is not the file it recorded (sha256)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"the key {twice[:40]!r} appears twice in one object")
    return dict(pairs)


def load_manifest(text: str, where: Path) -> dict[str, Any]:
    """A manifest's text parsed (a key given twice in one object is refused: JSON readers
    disagree on which one counts) and checked (:func:`check_manifest`)."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as e:
        raise InputError(f"{where}: not a store manifest ({e}); nothing changed") from None
    return check_manifest(data, where)


def check_manifest(data: object, where: Path) -> dict[str, Any]:
    """``data`` (a parsed manifest) when it has the store's shape, its parts as
    ``{"name", "sha256", "rows"}`` (a format-1 manifest's have no sha256 nor rows: None);
    InputError otherwise. A manifest of a later format is refused: its store was written by a
    newer release."""

    def bad(why: str) -> InputError:
        return InputError(f"{where}: not a store manifest ({why}); nothing changed")

    if not isinstance(data, dict):
        raise bad("not an object")
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT:
        raise InputError(
            f"{where}: store format {version} was written by a newer release of audit (this "
            f"one reads formats 1 to {FORMAT}); upgrade audit to read it; nothing changed"
        )
    if version not in (1, FORMAT) or isinstance(version, bool):
        raise bad(f"unknown format {str(version)[:20]!r}")
    files, secrets = data.get("files"), data.get("secrets")
    if not isinstance(files, list):
        raise bad("'files' is not a list")
    if not isinstance(secrets, dict) or not all(isinstance(v, str) for v in secrets.values()):
        raise bad("'secrets' is not an object of fingerprints")
    paths: set[str] = set()
    shas: set[str] = set()
    names: set[str] = set()
    total = 0
    for i, entry in enumerate(files, 1):
        if not isinstance(entry, dict):
            raise bad(f"file {i} is not an object")
        for key, kind in _ENTRY.items():
            if not _is(entry.get(key), kind):
                raise bad(f"file {i}: '{key}' is missing or not a {_kind(kind)}")
        if entry["path"] in paths or entry["sha256"] in shas:
            raise bad(
                f"file {i} is listed twice ({entry['path'][:80]!r}): its records would count twice"
            )
        paths.add(entry["path"])
        shas.add(entry["sha256"])
        if entry["unreadable"] > entry["records"]:
            raise bad(f"file {i}: more unreadable records than records")
        parts = [_part(p, version, f"file {i}", bad) for p in entry["parts"]]
        for part in parts:
            if part["name"] in names:
                raise bad(f"file {i}: part {part['name']!r} is listed twice")
            names.add(part["name"])
        if version == FORMAT and sum(p["rows"] for p in parts) != entry["records"]:
            raise bad(f"file {i}: its parts' rows do not add up to its {entry['records']} records")
        total += entry["records"]
        if total > MAX_COUNT:
            raise bad("more records than a store can hold")
        entry["parts"] = parts
    return data


def _part(part: object, version: int, where: str, bad: Any) -> dict[str, Any]:
    """One part of a manifest entry as ``{"name", "sha256", "rows"}``, checked."""
    if version == 1:  # a format-1 manifest lists names only
        part = {"name": part, "sha256": None, "rows": None}
    if not isinstance(part, dict) or set(part) != set(_PART):
        raise bad(f"{where}: a part is not an object of {', '.join(_PART)}")
    name = part["name"]
    if not isinstance(name, str) or not PART_NAME.fullmatch(name):
        raise bad(f"{where}: part {str(name)[:80]!r} is not a part's name")
    if version != 1:
        if not isinstance(part["sha256"], str) or not _SHA256.fullmatch(part["sha256"]):
            raise bad(f"{where}: part {name!r} has no sha256")
        if not _is(part["rows"], int):
            raise bad(f"{where}: part {name!r}: 'rows' is not a count")
    return part


def _is(value: object, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return isinstance(value, kind)


def _kind(kind: type) -> str:
    return f"count (0 to {MAX_COUNT})" if kind is int else kind.__name__


def part_names(manifest: dict[str, Any]) -> list[str]:
    """Every part the manifest lists (dataset-relative names)."""
    return [p["name"] for e in manifest["files"] for p in e["parts"]]


def check_folder(root: Path, *, creating: bool) -> None:
    """InputError unless ``root`` holds a store or is to become one (``creating``); a folder
    with parts but no manifest is never touched (an ingest would delete its parts as a crash's
    strays); no link stands anywhere inside the store."""
    for name in (DATASET, ".staging", ".lock", "manifest.json"):
        if (root / name).is_symlink():
            raise InputError(f"{root / name}: a symbolic link; a store holds none (not used)")
    _no_links(root / DATASET)
    if (root / "manifest.json").is_file():
        return
    data = root / DATASET
    if data.is_dir() and any(data.glob("month=*/*.parquet")):
        raise InputError(
            f"{root}: holds store parts but no manifest.json; nothing changed (restore "
            "the manifest, or ingest into a new folder)"
        )
    if not creating:
        raise InputError(f"{root}: not an evidence store (no manifest.json); give LOGS")


def _no_links(folder: Path) -> None:
    """InputError naming the first symbolic link under ``folder`` (links are not followed)."""
    if not folder.is_dir():
        return
    for top, dirs, files in os.walk(folder):  # os.walk follows no link to a folder
        for name in (*dirs, *files):
            path = Path(top) / name
            if path.is_symlink():
                raise InputError(
                    f"{path}: a symbolic link inside the store; a store holds none (not "
                    "followed; nothing changed): replace it with the folder or file itself"
                )


def remove_strays(root: Path, manifest: dict[str, Any]) -> None:
    """Delete parts a crashed or failed ingest left (on disk, not in ``manifest``), and its
    staged files."""
    listed = set(part_names(manifest))
    data = root / DATASET
    if data.is_dir():
        for part in data.glob("month=*/*.parquet"):
            if f"{part.parent.name}/{part.name}" not in listed and not part.is_symlink():
                part.unlink()
    shutil.rmtree(root / ".staging", ignore_errors=True)


def staging_folder(root: Path) -> Path:
    """The store's ``.staging`` folder, made afresh."""
    staging = root / ".staging"
    staging.mkdir(exist_ok=True)
    return staging


def publish(root: Path, written: Iterable[Staged]) -> list[dict[str, Any]]:
    """Move staged parts into the dataset, each flushed to disk first (a power cut after the
    manifest's rename must not leave it listing a part that was never written); their manifest
    entries (name, sha256, rows)."""
    out = []
    for staged in written:
        with open(staged.path, "rb") as f:
            os.fsync(f.fileno())
            sha = hashlib.file_digest(f, "sha256").hexdigest()
        target = root / DATASET / staged.name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.path, target)
        out.append({"name": staged.name, "sha256": sha, "rows": staged.rows})
    return out


def part_problem(root: Path, part: dict[str, Any]) -> str | None:
    """Why the ``part`` (a manifest entry's) of the store at ``root`` is not the one recorded,
    or None. A format-1 part (no sha256) is only looked at for its Parquet footer."""
    return _part_problem(root / DATASET / part["name"], part["sha256"])


def _part_problem(path: Path, sha: str | None) -> str | None:
    try:
        with open(path, "rb", opener=_no_follow) as f:
            if sha is None:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(size - 4, 0))
                return None if f.read(4) == b"PAR1" else "truncated"
            if hashlib.file_digest(f, "sha256").hexdigest() != sha:
                return "its sha256 is not the one the manifest records"
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"cannot be read ({e.strerror or type(e).__name__})"
    return None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


def damaged_parts(root: Path, entry: dict[str, Any]) -> list[tuple[str, str]]:
    """The parts of ``entry`` that are missing or damaged, with why: ``(name, why)``."""
    out = []
    for part in entry["parts"]:
        why = _part_problem(root / DATASET / part["name"], part["sha256"])
        if why is not None:
            out.append((part["name"], why))
    return out


def check_parts(
    root: Path, manifest: dict[str, Any], names: Iterable[str], checked: set[str] | None = None
) -> None:
    """:class:`DamagedPart` for the first of the parts ``names`` that is missing or is not the
    file the manifest records (its sha256, read in one streaming pass per part). ``checked``:
    the parts found whole before (skipped; those found now are added)."""
    wanted = set(names)
    for entry in manifest["files"]:
        for part in entry["parts"]:
            name = part["name"]
            if name not in wanted or (checked is not None and name in checked):
                continue
            why = _part_problem(root / DATASET / name, part["sha256"])
            if why is None:
                if checked is not None:
                    checked.add(name)
                continue
            raise DamagedPart(
                f"{root / DATASET / name}: damaged ({why}); nothing was read. Run audit ingest "
                f"with its capture file ({entry['path']}) to repair it, or restore the store "
                "from a backup"
            )
