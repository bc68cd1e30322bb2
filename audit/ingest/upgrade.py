"""A store of an earlier format, rewritten in this release's (``audit ingest`` does it).

Format 1 (the first release's) lacks ``record_sha256``, keeps times as nanoseconds and records
no sha256 nor row count per part. Its parts are read, given the columns they lack (computed,
as ``record_sha256`` is from the stored columns, or missing), written as new parts under
``.staging`` and listed, with their sha256, in the manifest, which the ingest writes last: until
then the old manifest and parts stand, and a crash leaves the old store readable (the new parts
are strays the next ingest removes). The old parts are deleted once the new manifest is in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.errors import InputError
from audit.ingest.known_records import KnownRecords
from audit.ingest.parts import PartWriter
from audit.ingest.record_id import table_hashes
from audit.ingest.records import SCHEMA
from audit.ingest.store_folder import DATASET, FORMAT, part_problem, publish

__all__ = ["conform", "upgrade"]


def conform(table: pa.Table) -> pa.Table:
    """A part of any format as a table of this release's columns (:data:`SCHEMA`): a column
    it lacks is computed (``record_sha256``) or missing (null)."""
    arrays = []
    for f in SCHEMA:
        if f.name in table.column_names:
            arrays.append(table.column(f.name).cast(f.type))
        elif f.name == "record_sha256":
            arrays.append(table_hashes(table))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def upgrade(root: Path, manifest: dict[str, Any], staging: Path, obsolete: list[str]) -> str:
    """Rewrite every part of ``manifest`` (edited in place) in format :data:`FORMAT`; the
    replaced parts' names go to ``obsolete``. Returns the line that says so."""
    old = manifest["version"]
    known = KnownRecords(root, {"files": []})
    rewritten = repeated = 0
    for entry in manifest["files"]:
        staged = []
        for part in entry["parts"]:
            name = part["name"]
            why = part_problem(root, part)
            try:
                if why is not None:
                    raise OSError(why)
                table = conform(pq.read_table(root / DATASET / name))
            except (OSError, pa.ArrowException) as e:
                raise InputError(
                    f"{root / DATASET / name}: damaged ({e}); the store (format {old}) cannot "
                    f"be upgraded and nothing changed: restore the part from a backup, or ingest "
                    f"its capture file ({entry['path']}) into a new store"
                ) from None
            writer = PartWriter(staging, entry["sha256"][:16])
            writer.write(table)
            staged.extend(writer.finish())
            obsolete.append(name)
            rewritten += 1
        kept = known.keep(staged, staging, entry["sha256"][:16], set())
        repeated += kept.known
        entry["parts"] = publish(root, kept.parts)
        entry["records"] = sum(p["rows"] for p in entry["parts"])
        entry["unreadable"] -= kept.known_unreadable
    manifest["version"] = FORMAT
    extra = f"; {repeated} record(s) held twice now count once" if repeated else ""
    return (
        f"{root}: store upgraded from format {old} to {FORMAT} ({rewritten} part(s) rewritten"
        f"{extra})"
    )
