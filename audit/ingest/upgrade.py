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


def upgrade(
    root: Path,
    manifest: dict[str, Any],
    staging: Path,
    obsolete: list[str],
    at_hand: frozenset[str] = frozenset(),
) -> list[str]:
    """Rewrite every part of ``manifest`` (edited in place) in format :data:`FORMAT`; the
    replaced parts' names go to ``obsolete``. Returns the lines that say so.

    A damaged part of a file whose content is ``at_hand`` (the sha256 of a capture file given
    to this ingest) is repaired: that file's entry is dropped, and the ingest reads its records
    again from the file. Any other damaged part stops the upgrade, and nothing changes."""
    old = manifest["version"]
    known = KnownRecords(root, {"files": []})
    rewritten = repeated = 0
    lines: list[str] = []
    kept_files = []
    for entry in manifest["files"]:
        staged = []
        damaged = None
        for part in entry["parts"]:
            name = part["name"]
            why = part_problem(root, part)
            try:
                if why is not None:
                    raise OSError(why)
                table = conform(pq.read_table(root / DATASET / name))
            except (OSError, pa.ArrowException) as e:
                if entry["sha256"] not in at_hand:
                    raise InputError(
                        f"{root / DATASET / name}: damaged ({e}); the store (format {old}) "
                        "cannot be upgraded and nothing changed: restore the part from a "
                        f"backup, or give its capture file ({entry['path']}) to audit ingest "
                        "to repair it"
                    ) from None
                damaged = f"{root / DATASET / name}: damaged ({e})"
                break
            writer = PartWriter(staging, entry["sha256"][:16])
            writer.write(table)
            staged.extend(writer.finish())
            rewritten += 1
        if damaged is not None:  # its records are read again from the file at hand
            for part in staged:
                part.path.unlink(missing_ok=True)
            obsolete.extend(p["name"] for p in entry["parts"])
            lines.append(
                f"{damaged}; repaired: the {entry['records']} record(s) of {entry['path']} "
                "read again from the capture file given"
            )
            continue
        obsolete.extend(p["name"] for p in entry["parts"])
        kept = known.keep(staged, staging, entry["sha256"][:16], set())
        repeated += kept.known
        entry["parts"] = publish(root, kept.parts)
        entry["records"] = sum(p["rows"] for p in entry["parts"])
        entry["unreadable"] -= kept.known_unreadable
        kept_files.append(entry)
    manifest["files"] = kept_files
    manifest["version"] = FORMAT
    extra = f"; {repeated} record(s) held twice now count once" if repeated else ""
    lines.insert(
        0,
        f"{root}: store upgraded from format {old} to {FORMAT} ({rewritten} part(s) rewritten"
        f"{extra})",
    )
    return lines
