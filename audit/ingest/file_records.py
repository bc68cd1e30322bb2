"""The stored rows of every record a capture file holds now (``audit verify LOGS --store``).

A file's manifest entry lists the parts of the records first stored from it; a record already
stored from another file, or from an earlier version of this one (a log rewritten: its earlier
content's records kept under the earlier entry), is not stored again, and the entry counts
those as ``held``. For such a file the records are known by their ``record_sha256``: the file
is read again for its records' hashes and lines, and each record's stored row is taken from
wherever the store holds it, with the file's own ``source`` and ``line``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from audit.errors import InputError
from audit.ingest.formats import format_of
from audit.ingest.identity import unreadable_line_hashes
from audit.ingest.query import load_deliveries
from audit.ingest.record_id import table_hashes
from audit.ingest.scan import frame_from_arrow, open_store, scan
from audit.ingest.store import Store
from audit.ingest.verdicts import read_logs
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX
from audit.tables import STORED_DELIVERIES

__all__ = ["file_rows"]

#: What :func:`audit.ingest.record_id.table_hashes` reads (but the file's sha256).
_HASHED = [
    "source",
    "line",
    "received_at",
    "url",
    "response_status",
    "response_ms",
    "subscription_logged",
    "subscription_id",
    "signature",
    "timestamp_header",
    "event_header",
    "delivery_id",
    "body",
    "verdict",
    "detail",
]


def file_rows(
    store_dir: str | os.PathLike[str],
    paths: Sequence[str],
    secrets_path: str | os.PathLike[str],
    *,
    columns: Sequence[str],
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> pd.DataFrame:
    """``columns`` of every record the ingested files ``paths`` (manifest entries, as
    :attr:`audit.ingest.store.IngestResult.paths` gives them, just ingested) hold now, file by
    file in input order: those whose entry holds all its records from its parts, the others
    (``held`` records) read again for their hashes (:mod:`audit.ingest.file_records`)."""
    store = open_store(store_dir)
    entries = {e["path"]: e for e in store.manifest()["files"]}
    frames = []
    whole: list[str] = []  # a run of files read from their own parts, in one scan
    for path in dict.fromkeys(paths):  # a content given twice is one entry, read once
        entry = entries[path]
        held = entry.get("held", 0)
        if not isinstance(held, int) or isinstance(held, bool) or held < 0:
            raise InputError(f"{store.manifest_path}: {path}: 'held' is not a count")
        if not held:
            whole.append(path)
            continue
        if whole:
            frames.append(load_deliveries(store, columns=list(columns), paths=whole))
            whole = []
        frames.append(_held_rows(store, entry, secrets_path, columns, header_prefix, tolerance_s))
    if whole or not frames:
        frames.append(load_deliveries(store, columns=list(columns), paths=whole))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _held_rows(
    store: Store,
    entry: dict[str, Any],
    secrets_path: str | os.PathLike[str],
    columns: Sequence[str],
    header_prefix: str,
    tolerance_s: float,
) -> pd.DataFrame:
    """The stored rows of the records of ``entry``'s file, by their hashes, with its lines."""
    path = entry["path"]
    read = read_logs(
        [path],
        secrets_path,
        columns=_HASHED,
        header_prefix=header_prefix,
        tolerance_s=tolerance_s,
        hash_files=False,
    ).rows
    table = pa.Table.from_pandas(read, preserve_index=False)
    table = table.append_column("file_sha256", pa.array([entry["sha256"]] * len(read)))
    hashes_here = table_hashes(table).to_pylist()
    # An unreadable line is stored known by its bytes (audit.ingest.store), or, when it was
    # stored before that, by its file, line and reason: either is looked up.
    bad = {n for v, n in zip(read["verdict"], read["line"], strict=True) if v == "unreadable"}
    lines_known = (
        unreadable_line_hashes(Path(path), {int(n) for n in bad})
        if bad and format_of(Path(path).name).SPLITS_AT_LINES
        else {}
    )
    here = pd.DataFrame(
        {
            "source": read["source"].to_numpy(),
            "line": read["line"].to_numpy(),
            "record_sha256": hashes_here,
        }
    )
    del read, table
    wanted = [c for c in columns if c not in ("source", "line")]
    hashes = sorted(set(here["record_sha256"]) | set(lines_known.values()))
    stored = frame_from_arrow(
        scan(
            store.parts(),
            ["source", "line", *wanted, "record_sha256"],
            "WHERE list_contains(?, record_sha256)",
            [hashes],
        )
    )
    # One row per record (a line repeated within a file is stored twice, alike), without the
    # source and line it was first stored with.
    stored = stored.drop_duplicates("record_sha256")[[*wanted, "record_sha256"]]
    if lines_known:
        held = set(stored["record_sha256"])
        by_bytes = here["line"].map(lambda n: lines_known.get(int(n)))
        use = by_bytes.isin(held)
        here.loc[use, "record_sha256"] = by_bytes[use]
    got = here.merge(stored, on="record_sha256", how="left", validate="many_to_one")
    missing = int((~here["record_sha256"].isin(stored["record_sha256"])).sum())
    if missing:
        raise InputError(
            f"{path}: {missing} of its record(s) are not in the store; run audit ingest with it"
        )
    declared = STORED_DELIVERIES.dtypes()
    return got.astype({c: declared[c] for c in ("source", "line")})[list(columns)]
