"""The records a store holds, by ``record_sha256``: what an ingest does not store again.

A record is known by the hash of the request as captured (:mod:`audit.ingest.record_id`); the
same request in a second file or in a new version of a file is stored once (a line repeated
within one file is two receipts, as the raw captures count them).
The hashes are read per month of receipt (a record's month is part of what it is), only for the
months an ingest writes to, from the ``record_sha256`` column of the parts the manifest lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.ingest.parts import PartWriter, Staged
from audit.ingest.store_folder import DATASET, part_problem

__all__ = ["Kept", "KnownRecords"]


@dataclass
class Kept:
    """What :meth:`KnownRecords.keep` kept of some staged parts."""

    parts: list[Staged] = field(default_factory=list)
    #: Rows left out: their record is stored already.
    known: int = 0
    #: Of those, unreadable records.
    known_unreadable: int = 0


class KnownRecords:
    """The ``record_sha256`` of every stored record, per month, read when first needed."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root, self.manifest = root, manifest
        #: month -> part name (or a staged part's path) -> its hashes.
        self.months: dict[str, dict[str, pa.Array]] = {}

    def _month(self, month: str) -> dict[str, pa.Array]:
        if month not in self.months:
            got: dict[str, pa.Array] = {}
            for entry in self.manifest["files"]:
                for part in entry["parts"]:
                    name = part["name"]
                    if name.split("/")[0] != month or part_problem(self.root, part):
                        continue  # a damaged part vouches for nothing (it is repaired apart)
                    path = self.root / DATASET / name
                    table = pq.read_table(path, columns=["record_sha256"])
                    got[name] = table.column(0).combine_chunks()
            self.months[month] = got
        return self.months[month]

    def forget(self, names: list[str]) -> None:
        """The parts ``names`` no longer count (replaced, or repaired)."""
        for got in self.months.values():
            for name in names:
                got.pop(name, None)

    def add(self, name: str, hashes: pa.Array) -> None:
        """The part ``name`` (``month=…/…``) now holds these records."""
        self._month(name.split("/")[0])[name] = hashes

    def keep(self, staged: list[Staged], staging: Path, stem: str, own: set[str]) -> Kept:
        """``staged`` (the parts of one read of a file) without the records stored already
        by other files or other versions of it (the parts ``own``, of its own entry, and its
        other staged parts do not count: a line repeated within one file is two receipts, as
        the raw captures count them). A staged part that holds any is written again without
        them; one left empty goes. The records kept are known from then on."""
        out = Kept()
        new: list[tuple[str, pa.Array]] = []
        for part in staged:
            month = part.name.split("/")[0]
            hashes = pq.read_table(part.path, columns=["record_sha256"]).column(0)
            hashes = hashes.combine_chunks()
            known = [h for name, h in self._month(month).items() if name not in own]
            keep = _unknown(hashes, known)
            if keep is None:
                out.parts.append(part)
                new.append((part.name, hashes))
                continue
            table = pq.read_table(part.path)
            left = table.filter(pa.array(keep))
            dropped = table.filter(pa.array(~keep))
            out.known += dropped.num_rows
            unreadable = pc.sum(pc.equal(dropped.column("verdict"), "unreadable")).as_py()
            out.known_unreadable += unreadable or 0
            part.path.unlink()
            if left.num_rows:
                writer = PartWriter(staging, stem)
                writer.write(left)
                for again in writer.finish():
                    out.parts.append(again)
                    new.append((again.name, left.column("record_sha256").combine_chunks()))
        for name, hashes in new:
            self.add(name, hashes)
        return out


def _unknown(hashes: pa.Array, known: list[pa.Array]) -> np.ndarray[Any, Any] | None:
    """Which of ``hashes`` are not in ``known`` (None: all of them)."""
    if not known:
        return None
    seen = pa.concat_arrays(known) if len(known) > 1 else known[0]
    keep = ~pc.is_in(hashes, value_set=seen).to_numpy(zero_copy_only=False)
    return None if keep.all() else keep
