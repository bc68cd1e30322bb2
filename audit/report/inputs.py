"""The report's load step, in one function: files -> verified deliveries, listings, file list.

:func:`load_inputs` is the only place the report reads capture logs, the secrets file (once),
snapshots and mutes. A store-backed loader (``--store DIR``) replaces it here and nowhere else:
everything after it works on the :class:`Inputs` frames.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from audit.errors import InputError

__all__ = ["Inputs", "load_inputs"]


@dataclass(frozen=True)
class Inputs:
    """What the analyses need, loaded once.

    Attributes
    ----------
    deliveries
        One row per capture record, verified as of its receipt (``docs/tables.md``).
    subscriptions
        Listing snapshot rows (empty frame when none was given).
    files
        Every file read: ``source, size, sha256, records, unreadable, kind``. The secrets file
        has its size only (a hash would let weak secrets be guessed).
    secrets_age
        Each subscription's newest secret's ``valid_from`` (ns) or None; never a value.
    mutes
        The mutes frame, or None.
    """

    deliveries: pd.DataFrame
    subscriptions: pd.DataFrame
    files: pd.DataFrame
    secrets_age: Mapping[str, int | None]
    mutes: pd.DataFrame | None = None


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def load_inputs(
    logs: Sequence[str | os.PathLike],
    *,
    secrets_path: str | os.PathLike,
    snapshots: Sequence[str | os.PathLike] = (),
    mutes_path: str | os.PathLike | None = None,
    header_prefix: str,
    client_id: str | None = None,
) -> Inputs:
    """Load and verify every input of a report (reads files; everything after is pure).

    Raises
    ------
    InputError
        No log given, or a path that does not exist or cannot be read (one line naming it).
    """
    from audit.analysis.subscriptions import load_snapshots, snapshot_files
    from audit.findings import read_mutes
    from audit.ingest.load import load_captures
    from audit.ingest.secrets import read_secrets

    if not logs:
        raise InputError("give at least one capture file, folder or glob")
    secrets_file = Path(secrets_path).expanduser()
    if not secrets_file.is_file():
        raise InputError(f"{secrets_file}: the secrets file does not exist")
    store = read_secrets(secrets_file)
    caps = load_captures(list(logs), header_prefix=header_prefix, secrets=store)
    subs = load_snapshots(list(snapshots))
    if client_id:
        subs = subs[subs["client_id"] == client_id].reset_index(drop=True)
    mutes = read_mutes(mutes_path) if mutes_path else None
    rows = [caps.inputs.assign(kind="capture log")]
    extra = [("secrets", secrets_file.resolve(), False)]
    extra += [("snapshot", p, True) for p in (snapshot_files(snapshots) if snapshots else [])]
    if mutes_path:
        extra.append(("mutes", Path(mutes_path).resolve(), True))
    for kind, path, hashed in extra:
        blob = path.read_bytes()
        rows.append(
            pd.DataFrame(
                [
                    {
                        "source": str(path),
                        "size": len(blob),
                        "sha256": _sha256(blob) if hashed else "",
                        "kind": kind,
                    }
                ]
            )
        )
    files = pd.concat(rows, ignore_index=True)
    return Inputs(caps.deliveries, subs, files, store.latest_valid_from(), mutes)
