"""The analysis's input as one relation, whatever it was read from: the verified deliveries of
raw captures (an Arrow table) or those of an evidence store (its parts, read where they lie).

Every rule (:mod:`audit.analysis.engine`) reads the relation :func:`deliveries_rule` gives:
the stored columns, ``source`` as the store's manifest names each file now, and ``_row``, the
input order (the order of the files' paths, then of their parts, then the lines): the order
rules break ties by, the same order a frame read from the store has
(:func:`audit.ingest.query.load_deliveries`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from audit.analysis.engine import Parquet, Source
from audit.ingest.scan import open_store
from audit.ingest.store import Store
from audit.ingest.store_folder import DATASET
from audit.paths import source_name
from audit.tables import STORED_DELIVERIES

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = ["LINE_BITS", "deliveries_rule", "store_sources"]

#: ``_row`` is the rank of a row's file (by its name) shifted by this many bits, plus its line.
LINE_BITS = 32


def store_sources(store: Store | str | os.PathLike[str]) -> dict[str, Source]:
    """The inputs of :func:`deliveries_rule` for every record of ``store``: ``stored`` (its
    parts, each checked against its sha256 first, read where they lie) and ``parts`` (one row per
    part: its base name, its file's name in the manifest, the file's rank by that name)."""
    s = open_store(store)
    names, files, ranks = [], [], []
    for rank, entry in enumerate(sorted(s.manifest()["files"], key=lambda e: e["path"])):
        for part in entry["parts"]:  # a file's lines are its own: a grown file's are new
            names.append(part["name"])
            files.append(source_name(entry["path"]))
            ranks.append(rank)
    paths = {p.relative_to(s.root / DATASET).as_posix(): p for p in s.parts()}  # checked
    parts = pa.table(
        {
            "filename": pa.array([Path(n).name for n in names], pa.string()),
            "file_name": pa.array(files, pa.string()),
            "_file": pa.array(ranks, pa.int64()),
        }
    )
    located = tuple(paths[n] for n in names)
    stored = Parquet(located, _stored_schema(located), filename=True)
    return {"stored": stored, "parts": parts}


def _stored_schema(paths: tuple[Path, ...]) -> pa.Schema:
    """The stored columns the parts hold (all of them, for a store of this release)."""
    declared = STORED_DELIVERIES.arrow_schema()
    if not paths:
        return declared
    held = pq.read_schema(paths[0])
    return pa.schema([held.field(n) if n in held.names else declared.field(n) for n in held.names])


def deliveries_rule(stored: ir.Table, parts: ir.Table) -> ir.Table:
    """The stored rows with ``source`` as the manifest names their file now (a rotated or
    renamed log's rows keep the name they were stored with) and ``_row`` (file, then line).
    ``stored`` carries ``filename`` (the base name of the part each row was read from: part
    names are unique in a store)."""
    joined = stored.join(parts, stored.filename == parts.filename)
    return joined.mutate(
        source=joined.file_name,
        _row=joined._file * (1 << LINE_BITS) + joined.line,
    ).drop("file_name", "_file", "filename")
