"""A store of an earlier format, rewritten in this release's (``audit ingest`` does it).

Format 1 (the first release's) lacks ``record_sha256``, keeps times as nanoseconds and records
no sha256 nor row count per part. Its parts are read, given the columns they lack (computed,
as ``record_sha256`` is from the stored columns, or missing), written as new parts under
``.staging`` and listed, with their sha256, in the manifest, which the ingest writes last: until
then the old manifest and parts stand, and a crash leaves the old store readable (the new parts
are strays the next ingest removes). The old parts are deleted once the new manifest is in place.

Format-1 parts record no sha256, so a part is checked before it is carried over, that its damage
is never laundered into format 2 (hashed and vouched for by the new manifest):

* its columns are those of a store part (a part lacking one, or holding one of another type, is
  damaged, named in one line);
* each row's ``file_sha256`` is its entry's and each body hashes to its ``body_sha256`` (a
  flipped bit in a body still marked ``valid`` is found without the capture file);
* when the capture file of its entry is given to the ingest (the same content: its sha256), each
  row's ``record_sha256`` is that of the record at its line in the file.

A part that fails is repaired from its capture file when it is given (the entry's records are
read again from the file), else the upgrade stops, naming the part and the file to give, and
nothing changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import InputError
from audit.ingest import records
from audit.ingest.formats import format_of
from audit.ingest.known_records import KnownRecords
from audit.ingest.parts import PartWriter
from audit.ingest.record_id import table_hashes
from audit.ingest.records import SCHEMA
from audit.ingest.secrets import SecretStore
from audit.ingest.store_folder import DATASET, FORMAT, part_problem, publish
from audit.spec import DEFAULT_HEADER_PREFIX, header_names

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
    at_hand: Mapping[str, Path] | frozenset[str] = frozenset(),
) -> list[str]:
    """Rewrite every part of ``manifest`` (edited in place) in format :data:`FORMAT`; the
    replaced parts' names go to ``obsolete``. Returns the lines that say so.

    A damaged part (unreadable, of other columns, or whose rows disagree with themselves or
    with the capture file) of a file whose content is ``at_hand`` (the sha256 of a capture file
    given to this ingest, mapped to that file's path) is repaired: that file's entry is
    dropped, and the ingest reads its records again from the file. Any other damaged part stops
    the upgrade, and nothing changes."""
    old = manifest["version"]
    known = KnownRecords(root, {"files": []})
    rewritten = repeated = 0
    lines: list[str] = []
    kept_files = []
    for entry in manifest["files"]:
        staged = []
        damaged = None
        capture = at_hand.get(entry["sha256"]) if isinstance(at_hand, Mapping) else None
        in_file: dict[int, str] | None = None
        for part in entry["parts"]:
            name = part["name"]
            why = part_problem(root, part)
            try:
                if why is not None:
                    raise OSError(why)
                table = pq.read_table(root / DATASET / name)
                _check_columns(table)
                table = conform(table)
                _check_rows(table, entry["sha256"])
                if capture is not None:
                    if in_file is None:
                        in_file = _file_hashes(capture, entry["sha256"], manifest)
                    _check_against(table, in_file, capture)
            except (OSError, pa.ArrowException, _Disagrees) as e:
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


class _Disagrees(Exception):
    """A part's rows are not what its file held (the reason is the message)."""


def _check_columns(table: pa.Table) -> None:
    """A part holds every column of a format-1 part, each of its type (or one it casts to)."""
    for f in SCHEMA:
        if f.name == "record_sha256":
            continue  # the one column format 1 lacks
        if f.name not in table.column_names:
            raise _Disagrees(f"it lacks the column {f.name!r}: not a store part's columns")
        got = table.schema.field(f.name).type
        if got != f.type and not _castable(got, f.type):
            raise _Disagrees(f"its column {f.name!r} holds {got}, not {f.type}")
        if not f.nullable and table.column(f.name).null_count:
            raise _Disagrees(f"its column {f.name!r} has missing values")


def _castable(got: pa.DataType, want: pa.DataType) -> bool:
    """Types a format-1 part may hold for ``want`` (times in nanoseconds, text as large)."""
    if pa.types.is_timestamp(want):
        return bool(pa.types.is_timestamp(got) and got.tz == want.tz)
    kinds = (pa.types.is_string, pa.types.is_large_string)
    if any(k(want) for k in kinds):
        return any(k(got) for k in kinds)
    kinds = (pa.types.is_binary, pa.types.is_large_binary)
    if any(k(want) for k in kinds):
        return any(k(got) for k in kinds)
    return False


def _check_rows(table: pa.Table, sha256: str) -> None:
    """Each row names its entry's file and each body hashes to its ``body_sha256``."""
    files = table.column("file_sha256")
    if not pc.all(pc.equal(files, sha256)).as_py():
        raise _Disagrees("a row names another capture file (file_sha256)")
    lines = table.column("line").to_pylist()
    bodies = table.column("body").to_pylist()
    sums = table.column("body_sha256").to_pylist()
    for line, body, want in zip(lines, bodies, sums, strict=True):
        if body is not None and want is not None and hashlib.sha256(body).hexdigest() != want:
            raise _Disagrees(
                f"the body of the record of line {line} does not hash to its body_sha256"
            )


def _file_hashes(path: Path, sha256: str, manifest: dict[str, Any]) -> dict[int, str]:
    """``record_sha256`` by line of every record of the capture file ``path`` (content
    ``sha256``), read as the store reads it (its header prefix; secrets play no part)."""
    prefix = manifest.get("header_prefix", DEFAULT_HEADER_PREFIX)
    wanted = {v: k for k, v in header_names(prefix).items()}
    fmt = format_of(path.name)
    pieces = (
        [(records.read_whole(path), 1)]
        if not fmt.SPLITS_AT_LINES
        else ((c.data, c.first_line) for c in records.read_chunks(path))
    )
    out: dict[int, str] = {}
    none = SecretStore.from_values({})
    for data, first in pieces:
        table, _ = records.verify_chunk(
            data,
            kind=fmt.NAME,
            source=str(path),
            first_line=first,
            wanted=wanted,
            secrets=none,
            tolerance_s=0.0,
            file_sha256=sha256,
        )
        lines = table.column("line").to_pylist()
        out.update(zip(lines, table.column("record_sha256").to_pylist(), strict=True))
    return out


def _check_against(table: pa.Table, in_file: dict[int, str], path: Path) -> None:
    """Each row is the record its capture file holds at its line."""
    lines = table.column("line").to_pylist()
    hashes = table.column("record_sha256").to_pylist()
    for line, got in zip(lines, hashes, strict=True):
        if in_file.get(line) != got:
            raise _Disagrees(f"the record of line {line} is not the one {path} holds there")
