"""The evidence store's folder: its manifest checked before it is believed, its parts
published, checked and cleaned up.

An ingest deletes the parts its manifest does not list and the parts it replaces, by the names
the manifest gives: a manifest of the wrong shape, or a part named outside the dataset
(``../../etc/x``, an absolute path), stops it with one line before anything is touched. No
symbolic link inside the store is followed (the manifest, ``.lock``, ``.staging``,
``deliveries``): a link there would make an ingest write or delete outside the store.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from audit.errors import InputError

__all__ = [
    "DATASET",
    "PART_NAME",
    "check_folder",
    "check_manifest",
    "parts_present",
    "publish",
    "remove_strays",
    "staging_folder",
]

DATASET = "deliveries"

#: How the store names its parts (``month=2026-10/part-<file sha>-<random>.parquet``).
PART_NAME = re.compile(r"month=(?:\d{4}-\d{2}|none)/part-[0-9A-Za-z_-]+\.parquet")

_ENTRY = {
    "path": str,
    "sha256": str,
    "size": int,
    "records": int,
    "unreadable": int,
    "lines": int,
    "parts": list,
}


def check_manifest(data: object, where: Path, version: int) -> dict[str, Any]:
    """``data`` (a parsed manifest) when it has the store's shape; InputError otherwise."""

    def bad(why: str) -> InputError:
        return InputError(f"{where}: not a store manifest ({why}); nothing changed")

    if not isinstance(data, dict) or data.get("version") != version:
        raise InputError(f"{where}: not a version {version} store manifest")
    files, secrets = data.get("files"), data.get("secrets")
    if not isinstance(files, list):
        raise bad("'files' is not a list")
    if not isinstance(secrets, dict) or not all(isinstance(v, str) for v in secrets.values()):
        raise bad("'secrets' is not an object of fingerprints")
    for i, entry in enumerate(files, 1):
        if not isinstance(entry, dict):
            raise bad(f"file {i} is not an object")
        for key, kind in _ENTRY.items():
            value = entry.get(key)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise bad(f"file {i}: '{key}' is missing or not a {kind.__name__}")
        for part in entry["parts"]:
            if not isinstance(part, str) or not PART_NAME.fullmatch(part):
                raise bad(f"file {i}: part {str(part)[:80]!r} is not a part's name")
    return data


def check_folder(root: Path, *, creating: bool) -> None:
    """InputError unless ``root`` holds a store or is to become one (``creating``); a folder
    with parts but no manifest is never touched (an ingest would delete its parts as a crash's
    strays); no link stands where the store keeps its data."""
    for name in (DATASET, ".staging", ".lock", "manifest.json"):
        if (root / name).is_symlink():
            raise InputError(f"{root / name}: a symbolic link; a store holds none (not used)")
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


def remove_strays(root: Path, manifest: dict[str, Any]) -> None:
    """Delete parts a crashed or failed ingest left (on disk, not in ``manifest``), and its
    staged files."""
    listed = {p for e in manifest["files"] for p in e["parts"]}
    data = root / DATASET
    if data.is_dir():
        for part in data.glob("month=*/*.parquet"):
            if f"{part.parent.name}/{part.name}" not in listed:
                part.unlink()
    shutil.rmtree(root / ".staging", ignore_errors=True)


def staging_folder(root: Path) -> Path:
    """The store's ``.staging`` folder, made afresh."""
    staging = root / ".staging"
    staging.mkdir(exist_ok=True)
    return staging


def publish(root: Path, written: list[tuple[Path, str]]) -> list[str]:
    """Move staged parts into the dataset, each flushed to disk first (a power cut after the
    manifest's rename must not leave it listing a part that was never written); their names."""
    names = []
    for path, name in written:
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        target = root / DATASET / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        names.append(name)
    return names


def parts_present(root: Path, entry: dict[str, Any]) -> bool:
    """Whether every part of ``entry`` is a file that ends as Parquet does (a part truncated or
    deleted counts as missing: its file is ingested again)."""
    for part in entry["parts"]:
        path = root / DATASET / part
        try:
            with open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                if f.read(4) != b"PAR1":
                    return False
        except OSError:
            return False
    return True
