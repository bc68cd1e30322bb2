"""Where stored records quote a secret: found at ingest, so that a reader without the secrets
file cuts them too.

Captured requests are attacker-controlled and may quote a signing secret (in a URL, a header,
the incident data). An ingest knows the secrets; a later reader (``audit analyze --store``,
``audit.open(store=...)``) may not. The store never keeps a secret's value outside the records
themselves (evidence, kept as received): the manifest's ``quoted_secrets`` says *where* a record
holds one, and a reader takes the value from there and cuts it from everything it shows
(:func:`audit.redaction.register_sensitive`).

Manifest shape::

    "quoted_secrets": {
      "scanned": ["<keyed fingerprint>", ...],   secrets every listed part was searched for
      "at": [{"fp": ..., "part": "month=2026-10/part-....parquet", "row": 12,
              "column": "data_url", "start": 27, "end": 59}, ...]
    }

One location per value (its plain form, or the escaped form a body holds), found by the value's
keyed fingerprint (HMAC-SHA256 keyed by the value, of a fixed label: nothing that helps guess it);
``start``/``end`` are UTF-8 byte offsets in the cell. Each ingest searches the parts it wrote for
every secret of its file, and the parts it kept for the secrets not searched for yet (a secret
added to the file later is found in records stored before it). A part that an ingest replaces
(secrets changed, an upgrade) takes its locations with it; its replacement is new, so searched.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.errors import InputError
from audit.ingest.secrets import SecretStore
from audit.ingest.store_folder import DATASET, check_parts
from audit.redaction import (
    MIN_SENSITIVE_LEN,
    _Cutter,
    _hits,
    _json_inner,
    _repr_inner,
    _text_like,
)

__all__ = ["KEY", "locate", "quoted_values", "update"]

#: The manifest key.
KEY = "quoted_secrets"
_LABEL = b"audit evidence store: quoted secret v1"
#: Locations a manifest may list (one per value; a secrets file of thousands of subscriptions).
MAX_LOCATIONS = 100_000


def _fp(value: str) -> str:
    return hmac.digest(value.encode("utf-8", "surrogatepass"), _LABEL, hashlib.sha256).hex()


def _secret_values(secrets: SecretStore) -> list[str]:
    values = {s.key.decode("utf-8", "replace") for s in secrets.all_secrets()}
    return sorted(v for v in values if len(v) >= MIN_SENSITIVE_LEN)


def locate(
    root: Path, names: Iterable[str], values: list[str], done: set[str]
) -> list[dict[str, Any]]:
    """Where the parts ``names`` (dataset-relative) hold one of ``values`` (or its escaped
    forms) whose fingerprint is not in ``done``: one location per value (``done`` is extended)."""
    if not values:
        return []
    cutter = _Cutter(values)
    forms = {f(v) for v in values for f in (str, _repr_inner, _json_inner)}
    wanted = sorted(forms, key=len, reverse=True)  # a value inside another is found after it
    found: list[dict[str, Any]] = []
    for name in names:
        if all(_fp(v) in done for v in wanted):
            break
        file = pq.ParquetFile(root / DATASET / name)
        columns = [f.name for f in file.schema_arrow if _text_like(f.type)]
        for column in columns:
            array = file.read(columns=[column]).column(0).combine_chunks()
            hits = _hits(cutter, array)
            if hits is None:
                continue
            for row in hits.nonzero()[0].tolist():
                cell = array[row].as_py()
                data = cell if isinstance(cell, bytes) else cell.encode("utf-8", "surrogatepass")
                for value in wanted:
                    fp = _fp(value)
                    start = data.find(value.encode("utf-8", "surrogatepass"))
                    if fp in done or start < 0:
                        continue
                    done.add(fp)
                    end = start + len(value.encode("utf-8", "surrogatepass"))
                    found.append(
                        {
                            "fp": fp,
                            "part": name,
                            "row": row,
                            "column": column,
                            "start": start,
                            "end": end,
                        }
                    )
    return found


def update(root: Path, manifest: dict[str, Any], before: set[str], secrets: SecretStore) -> None:
    """Record in ``manifest`` (edited in place) where its parts quote a secret of ``secrets``.

    ``before``: the part names the manifest listed when the ingest began (kept ones were
    searched already for the secrets in ``scanned``)."""
    now = [p["name"] for e in manifest["files"] for p in e["parts"]]
    listed = set(now)
    old = manifest.get(KEY) or {}
    scanned = set(old.get("scanned", [])) if isinstance(old.get("scanned"), list) else set()
    at = [a for a in old.get("at", []) if isinstance(a, dict) and a.get("part") in listed]
    values = _secret_values(secrets)
    done = {a["fp"] for a in at}
    new = sorted(listed - before) if old else sorted(listed)
    at += locate(root, new, values, done)
    fresh = [v for v in values if _fp(v) not in scanned]
    kept = sorted(listed & before) if old else []
    at += locate(root, kept, fresh, done)
    manifest[KEY] = {
        "scanned": sorted(scanned | {_fp(v) for v in values}),
        "at": at[:MAX_LOCATIONS],
    }


def quoted_values(
    root: Path, manifest: dict[str, Any], checked: set[str] | None = None
) -> list[str]:
    """The values the store's records quote, read where the manifest's locations say (each
    part checked against its sha256 first; ``checked``: parts found whole before). A location
    that is not one, or that holds no value, is one line."""
    block = manifest.get(KEY)
    if not block:
        return []
    at = block.get("at") if isinstance(block, dict) else None
    if not isinstance(at, list):
        raise InputError(f"{root / 'manifest.json'}: '{KEY}' holds no list of locations")
    keys = tuple(_key(root, a) for a in at)
    check_parts(root, manifest, {k[0] for k in keys}, checked)
    return list(_values(str(root), keys))


_Key = tuple[str, int, str, int, int]


def _key(root: Path, a: object) -> _Key:
    if isinstance(a, dict):
        part, row, column, start, end = (
            a.get(k) for k in ("part", "row", "column", "start", "end")
        )
        texts = isinstance(part, str) and isinstance(column, str)
        ints = type(row) is int and type(start) is int and type(end) is int
        if texts and ints and row >= 0 and 0 <= start < end:  # type: ignore[operator]  # ints
            return part, row, column, start, end  # type: ignore[return-value]  # checked above
    raise InputError(f"{root / 'manifest.json'}: a '{KEY}' location is not one")


@functools.lru_cache(maxsize=64)
def _values(root: str, keys: tuple[_Key, ...]) -> tuple[str, ...]:
    """The values at ``keys`` (parts are never rewritten under one name: cached)."""
    out = []
    columns: dict[tuple[str, str], pa.ChunkedArray] = {}
    for part, row, column, start, end in keys:
        if (part, column) not in columns:
            try:
                got = pq.read_table(Path(root) / DATASET / part, columns=[column])
            except (OSError, pa.ArrowException, KeyError) as e:
                raise InputError(f"{root}: {part}: cannot read a quoted secret ({e})") from None
            columns[part, column] = (
                got.column(0) if got.num_columns else pa.chunked_array([], pa.string())
            )
        array = columns[part, column]
        cell = array[row].as_py() if row < len(array) else None
        data = cell if isinstance(cell, bytes) else (cell or "").encode("utf-8", "surrogatepass")
        value = data[start:end].decode("utf-8", "replace")
        if end - start < MIN_SENSITIVE_LEN or len(data) < end:
            raise InputError(f"{root}: {part}: no quoted secret where the manifest says")
        out.append(value)
    return tuple(out)
