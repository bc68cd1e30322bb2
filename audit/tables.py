"""One declared schema per table: column -> dtype, nullable, meaning.

A :class:`Table` is data: the store's Parquet schema (:meth:`Table.arrow_schema`), empty frames
(:meth:`Table.empty`) and checks (:meth:`Table.validate`) all come from the same declaration, so
a column cannot mean one thing in a frame and another in a file. ``docs/tables.md`` describes the
same columns for readers.

Dtype names (pandas dtype / Arrow type):

========  ==========================  ===========================
``str``   ``str`` (missing = NaN)     ``string``
``int``   ``int64``                   ``int64``
``Int``   ``Int64`` (nullable)        ``int64``
``Float`` ``Float64`` (nullable)      ``float64``
``bool``  ``boolean`` (nullable)      ``bool``
``time``  ``datetime64[ns, UTC]``     ``timestamp[ns, UTC]``
``bytes`` ``object`` (bytes)          ``large_binary``
========  ==========================  ===========================

>>> DELIVERIES.column("verdict").meaning
'see docs/tables.md, Verdicts'
>>> list(DELIVERIES.empty().columns[:3])
['source', 'line', 'received_at']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from audit.errors import SchemaError

__all__ = ["DELIVERIES", "STORED_DELIVERIES", "Column", "Table"]

_STR = pd.StringDtype(na_value=np.nan)
_PANDAS: dict[str, object] = {
    "str": _STR,
    "int": np.dtype("int64"),
    "Int": pd.Int64Dtype(),
    "Float": pd.Float64Dtype(),
    "bool": pd.BooleanDtype(),
    "time": pd.DatetimeTZDtype("ns", "UTC"),
    "bytes": np.dtype(object),
}
_ARROW: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int": pa.int64(),
    "Int": pa.int64(),
    "Float": pa.float64(),
    "bool": pa.bool_(),
    "time": pa.timestamp("ns", tz="UTC"),
    "bytes": pa.large_binary(),
}


@dataclass(frozen=True)
class Column:
    """One column: ``name``, ``dtype`` (a key of the table above), ``nullable``, ``meaning``."""

    name: str
    dtype: str
    nullable: bool
    meaning: str

    def __post_init__(self) -> None:
        if self.dtype not in _PANDAS:
            raise ValueError(f"column {self.name}: unknown dtype {self.dtype!r}")


@dataclass(frozen=True)
class Table:
    """A named, ordered set of columns."""

    name: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        """The column called ``name`` (KeyError if it is not declared)."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def dtypes(self) -> dict[str, object]:
        """Column name -> pandas dtype."""
        return {c.name: _PANDAS[c.dtype] for c in self.columns}

    def arrow_schema(self) -> pa.Schema:
        """The Arrow (and Parquet) schema, with each column's meaning as field metadata."""
        return pa.schema(
            [
                pa.field(c.name, _ARROW[c.dtype], c.nullable, {"meaning": c.meaning})
                for c in self.columns
            ]
        )

    def empty(self) -> pd.DataFrame:
        """A frame with no rows and every column in its declared dtype."""
        return pd.DataFrame({c.name: pd.Series([], dtype=_PANDAS[c.dtype]) for c in self.columns})

    def extend(self, name: str, *columns: Column) -> Table:
        """A new table with these columns after this one's."""
        return Table(name, (*self.columns, *columns))

    def problems(self, df: pd.DataFrame) -> list[str]:
        """Every way ``df`` departs from the schema (missing columns, dtypes, nulls)."""
        out = []
        for c in self.columns:
            if c.name not in df.columns:
                out.append(f"missing column {c.name!r}")
                continue
            s = df[c.name]
            want = _PANDAS[c.dtype]
            if c.dtype == "time":
                ok = isinstance(s.dtype, pd.DatetimeTZDtype) and str(s.dtype.tz) == "UTC"
            elif c.dtype == "str":
                ok = pd.api.types.is_string_dtype(s.dtype) and s.dtype != object
            else:
                ok = s.dtype == want
            if not ok:
                out.append(f"column {c.name!r} has dtype {s.dtype}, expected {want}")
            if not c.nullable and len(s) and bool(s.isna().any()):
                out.append(f"column {c.name!r} has {int(s.isna().sum())} missing value(s)")
        return out

    def validate(self, df: pd.DataFrame) -> pd.DataFrame:
        """Return ``df`` unchanged, or raise one SchemaError listing every problem.

        >>> DELIVERIES.validate(pd.DataFrame({"source": [1]}))
        Traceback (most recent call last):
        ...
        audit.errors.SchemaError: deliveries: column 'source' has dtype int64, expected str; ...
        """
        found = self.problems(df)
        if found:
            raise SchemaError(f"{self.name}: " + "; ".join(found))
        return df

    def conform(self, df: pd.DataFrame) -> pd.DataFrame:
        """The declared columns of ``df`` in order, cast to their declared dtypes."""
        out = {}
        for c in self.columns:
            s = df[c.name]
            if c.dtype == "time":
                out[c.name] = s.astype(_PANDAS["time"])
            elif c.dtype != "bytes" and s.dtype != _PANDAS[c.dtype]:
                out[c.name] = s.astype(_PANDAS[c.dtype])
            else:
                out[c.name] = s
        return pd.DataFrame(out, index=df.index)


def _c(name: str, dtype: str, meaning: str, nullable: bool = True) -> Column:
    return Column(name, dtype, nullable, meaning)


DELIVERIES = Table(
    "deliveries",
    (
        _c("source", "str", "file the record came from", nullable=False),
        _c("line", "int", "1-based line (JSONL) or entry index (HAR)", nullable=False),
        _c("received_at", "time", "receiver's clock at receipt (empty when unreadable)"),
        _c("subscription_id", "str", "as logged, or inferred from the matching secret"),
        _c("url", "str", "where it was received"),
        _c("response_status", "Int", "receiver's answer (HTTP status)"),
        _c("response_ms", "Float", "receiver's answer time, ms"),
        _c("signature", "str", "signature header as received"),
        _c("timestamp_header", "str", "timestamp header as received"),
        _c("event_header", "str", "event header as received"),
        _c("delivery_id", "str", "delivery id header: one attempt; not authenticated"),
        _c("body", "bytes", "the raw body bytes, exactly as signed"),
        _c("event_id", "str", "envelope id"),
        _c("event", "str", "envelope event"),
        _c("event_timestamp", "time", "envelope timestamp"),
        _c("incident_id", "str", "envelope data.incidentId"),
        _c("verdict", "str", "see docs/tables.md, Verdicts", nullable=False),
        _c("detail", "str", "why, in one line (empty for valid)"),
        _c("hmac_ok", "bool", "a known secret matches, whatever the timestamp checks said"),
        _c("skew_s", "Float", "received_at minus the timestamp header, seconds"),
        _c("matched_secret", "str", "<subscription>#<n>: the n-th issued secret that matched"),
    ),
)
"""Loaded and verified deliveries: one row per input record (``audit.ingest.load``)."""

#: Incident ``data`` keys extracted once at ingest: (key, column).
DATA_FIELDS: tuple[tuple[str, str], ...] = (
    ("clientId", "data_client_id"),
    ("incidentClass", "data_incident_class"),
    ("incidentType", "data_incident_type"),
    ("source", "data_source"),
    ("status", "data_status"),
    ("domain", "data_domain"),
    ("url", "data_url"),
    ("safeDomain", "data_safe_domain"),
    ("subject", "data_subject"),
    ("reportedBy", "data_reported_by"),
    ("waitForClient", "data_wait_for_client"),
    ("timestamp", "data_timestamp"),
    ("lastHistoryUpdateTimestamp", "data_last_history_update"),
    ("burnStartedTimestamp", "data_burn_started"),
    ("takedownTimestamp", "data_takedown_timestamp"),
)

STORED_DELIVERIES = DELIVERIES.extend(
    "stored_deliveries",
    _c("subscription_logged", "bool", "the receiver logged subscription_id (else inferred)"),
    _c("file_sha256", "str", "sha256 of the capture file the record was read from", False),
    _c("body_sha256", "str", "sha256 of the raw body (compares copies without the body)"),
    _c("fingerprint", "str", "sha256 of canonical JSON of the envelope's event and data"),
    *(
        _c(col, "str", f"data.{key} as sent (strings only; true/false for a boolean)")
        for key, col in DATA_FIELDS
    ),
    _c("data_invalid", "int", "data fields of the wrong JSON type, ignored", nullable=False),
)
"""Rows of the evidence store (``audit.ingest.store``): deliveries plus what analyses read
instead of parsing bodies again. Partitioned by ``month`` (``YYYY-MM`` of ``received_at``,
``none`` for unreadable records without a time)."""
