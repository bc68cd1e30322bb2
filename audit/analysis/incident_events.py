"""Valid incident events, one row per event id, with the fields of their ``data`` parsed: the
input of the fold in :mod:`audit.analysis.incidents` (which states the rules).

Only rows whose ``verdict`` is ``valid`` count; events are de-duplicated by the body's event
``id`` (the first valid receipt wins, and only that body is parsed); test traffic
(:func:`audit.analysis.deliveries.is_test`), events without an incident id or a time, and
events stamped after ``as_of`` are left out and counted (``attrs["counts"]``, :data:`COUNT_KEYS`).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import pandas as pd
import pyarrow as pa

from audit.analysis.engine import arrow_input, run
from audit.analysis.event_fields import FIELD_COLUMNS, FIELDS, field_frame, parse_data, parse_times
from audit.analysis.rows import take_rows, take_rows_emptying
from audit.errors import ParameterError, SchemaError
from audit.ingest.receipts import (
    FOLD_FIELDS,
    FOLD_KEYS,
    RECEIPT_COLUMNS,
    RECEIPT_COUNT_KEYS,
    FirstReceipts,
)
from audit.spec import TEST_EVENT, TEST_INCIDENT_PREFIX
from audit.tables import DATA_FIELDS
from audit.timeutil import as_utc

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "COUNT_KEYS",
    "CREATED",
    "EVENT_COLUMNS",
    "RECEIPT_COLUMNS",
    "RECEIPT_COUNT_KEYS",
    "STATUS_CHANGED",
    "FirstReceipts",
    "incident_events",
]

CREATED = "incident.created"
STATUS_CHANGED = "incident.status_changed"
_UTC: Final = "datetime64[ns, UTC]"

EVENT_COLUMNS: tuple[str, ...] = (
    "incident_id",
    "event_id",
    "event",
    "event_timestamp",
    "received_at",
    "subscription_id",
    *FIELD_COLUMNS,
)
"""Columns of :func:`incident_events`, in order."""


COUNT_KEYS: tuple[str, ...] = (
    "valid",
    "no_event_id",
    "duplicates",
    "conflicting_bodies",
    "test_events",
    "no_incident_id",
    "no_event_time",
    "after_as_of",
    "events",
    "invalid_values",
    "unparsable_times",
)
"""Keys of ``attrs["counts"]`` (see :func:`incident_events`)."""

_EVENT_DTYPES: dict[str, str] = {
    "incident_id": "str",
    "event_id": "str",
    "event": "str",
    "event_timestamp": _UTC,
    "received_at": _UTC,
    "subscription_id": "str",
    **{col: (_UTC if kind == "time" else "str") for _, col, kind in FIELDS},
}
_NEEDED, _EXTRACTED = FOLD_KEYS, FOLD_FIELDS


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _check_columns(deliveries: object, fields: tuple[str, ...] = _EXTRACTED) -> pd.DataFrame:
    """``deliveries`` with the columns the fold reads: ``body``, or the extracted ``fields``."""
    if not isinstance(deliveries, pd.DataFrame):
        raise SchemaError(f"deliveries must be a DataFrame, got {type(deliveries).__name__}")
    missing = [c for c in _NEEDED if c not in deliveries.columns]
    if "body" not in deliveries.columns and not set(fields) <= set(deliveries.columns):
        missing.append("body")
    if missing == ["body"] and "fingerprint" in deliveries.columns:  # read from a store
        raise SchemaError(
            "these deliveries carry no incident fields (a store's read keeps them apart): "
            "fold load_analysis_inputs(...).first_receipts instead "
            "(run_analyses(..., first_receipts=got.first_receipts))"
        )
    if missing:
        raise SchemaError(
            f"deliveries lacks column(s): {', '.join(missing)}; verify it first "
            "(audit.ingest.verification.verify_frame or audit_signatures)"
        )
    for name in ("event_timestamp", "received_at"):
        if not isinstance(deliveries[name].dtype, pd.DatetimeTZDtype):
            raise SchemaError(
                f"column {name!r} must be a timezone-aware datetime, got {deliveries[name].dtype}"
            )
    return deliveries


def _body_key(d: pd.DataFrame) -> str:
    """The column that tells copies apart: the body, or its sha256 when only that is loaded."""
    for name in ("body", "body_sha256"):
        if name in d.columns:
            return name
    raise SchemaError("first receipts must be valid rows, one per event id")


def _typed(
    df: pd.DataFrame, dtypes: Mapping[str, object], *, categories: bool = False
) -> pd.DataFrame:
    """Columns in schema order with the declared dtypes (times converted to UTC, ns);
    ``categories``: a categorical column stands for a text one (not converted)."""
    out = {}
    for name, dtype in dtypes.items():
        col = df[name] if name in df.columns else pd.Series(index=df.index, dtype=object)
        if col.dtype == dtype or (categories and isinstance(col.dtype, pd.CategoricalDtype)):
            pass
        elif dtype == _UTC:
            if not isinstance(col.dtype, pd.DatetimeTZDtype):
                col = pd.to_datetime(col, utc=True)
            col = col.dt.tz_convert("UTC").astype(_UTC)
        else:
            col = col.astype(pd.api.types.pandas_dtype(dtype))
        out[name] = col
    return pd.DataFrame(out, index=df.index).reset_index(drop=True)


def _empty(dtypes: Mapping[str, object]) -> pd.DataFrame:
    return pd.DataFrame(
        {name: pd.Series([], dtype=pd.api.types.pandas_dtype(d)) for name, d in dtypes.items()}
    )


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


def incident_events(
    deliveries: pd.DataFrame | FirstReceipts, *, as_of: pd.Timestamp
) -> pd.DataFrame:
    """One row per distinct valid incident event, with the fields of its ``data`` parsed.

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries frame (``docs/tables.md``); needs ``verdict, subscription_id,
        event_id, event, event_timestamp, incident_id, received_at, body`` (or, from a store,
        the extracted fields instead of ``body``). Or :class:`FirstReceipts`, which are taken
        over (emptied): the result and counts are those of all the deliveries they stand for.
    as_of : pandas.Timestamp
        Timezone-aware. Events stamped after it are left out.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`EVENT_COLUMNS`, sorted by ``incident_id, event_timestamp, received_at,
        event_id``. ``received_at`` and ``subscription_id`` are those of the event's first valid
        receipt. ``data`` fields: ``client_id`` (clientId), ``incident_class``,
        ``incident_type``, ``source``, ``status``, ``domain``, ``url``, ``safe_domain``,
        ``subject``, ``reported_by`` (str), ``wait_for_client`` (str: ``"true"``/``"false"``
        for a boolean, a reason string as sent), and the times ``data_timestamp`` (timestamp),
        ``last_history_update_at``, ``burn_started_at``, ``takedown_timestamp``
        (``datetime64[ns, UTC]``; an ISO 8601 time without an offset is read as UTC).
        Missing (or ``null``) fields are NaN/NaT; unknown fields are ignored.
        ``attrs["counts"]`` maps each of :data:`COUNT_KEYS` to an int:

        - ``valid``: rows with verdict ``valid`` (nothing else is read);
        - ``no_event_id``: valid rows whose body has no event id (not an envelope);
        - ``duplicates``: valid rows dropped as further copies of an event id already kept;
        - ``conflicting_bodies``: event ids whose valid copies differ in their bytes (the first
          received copy is used);
        - ``test_events``: ``webhook.test`` events and ``test_`` incidents, left out;
        - ``no_incident_id``: events without a string ``data.incidentId``;
        - ``no_event_time``: events whose envelope timestamp is missing or unparsable (they
          cannot be ordered);
        - ``after_as_of``: events stamped after ``as_of``;
        - ``events``: events kept (the rows returned);
        - ``invalid_values``: field values of the wrong JSON type, ignored as missing;
        - ``unparsable_times``: time fields that are strings but not ISO 8601 (NaT).

        Every valid row is in exactly one bucket: ``valid == no_event_id + duplicates +
        test_events + no_incident_id + no_event_time + after_as_of + events``.

    Raises
    ------
    ParameterError
        ``as_of`` is naive or not a timestamp.
    SchemaError
        A needed column is missing, or a time column is not tz-aware.

    Examples
    --------
    >>> import orjson
    >>> def row(eid, event, ts, **data):
    ...     env = {"id": eid, "event": event, "timestamp": ts,
    ...            "data": {"incidentId": "inc_1", **data}}
    ...     t = pd.Timestamp(ts)
    ...     return {"verdict": "valid", "subscription_id": "wh_1", "event_id": eid,
    ...             "event": event, "event_timestamp": t, "incident_id": "inc_1",
    ...             "received_at": t, "body": orjson.dumps(env)}
    >>> d = pd.DataFrame([row("evt_2", "incident.status_changed", "2026-10-01T01:00:00Z",
    ...                       status="case_building"),
    ...                   row("evt_1", "incident.created", "2026-10-01T00:00:00Z",
    ...                       status="pending_review", source="CLIENT_REPORTED")])
    >>> ev = incident_events(d, as_of=pd.Timestamp("2026-10-02", tz="UTC"))
    >>> print(ev[["event_id", "status", "source"]].to_string(index=False))
    event_id         status          source
       evt_1 pending_review CLIENT_REPORTED
       evt_2  case_building             NaN
    """
    out, counts = _events(deliveries, as_utc(as_of))
    out.attrs["counts"] = counts
    return out


def _events(
    deliveries: pd.DataFrame | FirstReceipts, as_of: pd.Timestamp, *, categories: bool = False
) -> tuple[pd.DataFrame, dict[str, int]]:
    """:func:`incident_events` without attrs (pandas deep-copies attrs on every operation).

    From :class:`FirstReceipts`, their rows are taken over and emptied column by column as the
    events are copied out of them (the wide columns then never exist twice). ``categories``:
    their categorical texts stay categorical (the fold's own tables convert what they keep)."""
    if not isinstance(deliveries, FirstReceipts):
        return _events_of(_check_columns(deliveries), as_of)
    given = deliveries.counts
    d = _check_columns(deliveries.take_rows(), RECEIPT_COLUMNS[len(_NEEDED) :])
    if (d["received_at"] > as_of).any():
        raise ParameterError(
            "the first receipts hold rows received after as_of: load them up to as_of"
        )
    out, counts = _events_of(d, as_of, owned=True, categories=categories)
    if counts["no_event_id"] or counts["duplicates"]:
        raise SchemaError("first receipts must be valid rows, one per event id")
    counts.update({key: int(given[key]) for key in RECEIPT_COUNT_KEYS})
    return out, counts


def _events_of(
    d: pd.DataFrame, as_of: pd.Timestamp, *, owned: bool = False, categories: bool = False
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The events of checked deliveries; ``owned``: ``d`` is ours, emptied as it is copied."""
    counts = dict.fromkeys(COUNT_KEYS, 0)
    counts["valid"] = int((d["verdict"] == "valid").fillna(False).sum())
    inputs = {"deliveries": strings(arrow_input(d, list(_NEEDED))), "settings": as_of_table(as_of)}
    got = run(receipts_rule, inputs)
    rows = got.column("_row").to_numpy()
    bucket = got.column("bucket").to_pandas()
    counts["no_event_id"] = counts["valid"] - len(rows)
    for key, n in bucket.value_counts().items():
        counts[str(key)] = int(n)
    dup = (bucket == "duplicates").to_numpy()
    if dup.any():  # same event id, different bytes: counted (the first receipt is used)
        bodies = d[_body_key(d)]
        copies = bodies.iloc[rows[dup]].to_numpy(dtype=object)
        firsts = bodies.iloc[got.column("_first_row").to_numpy()[dup]].to_numpy(dtype=object)
        differ = copies != firsts
        ids = d["event_id"].iloc[rows[dup][differ]]
        counts["conflicting_bodies"] = int(ids.nunique())
    pos = rows[(bucket == "events").to_numpy()]  # in event order (the rule sorts them first)
    if not len(pos):
        return _empty(_EVENT_DTYPES), counts

    # Every column taken once, in order (filtering and sorting the wide frame copied each
    # extracted field twice: about 0.4 GB per copy at 1M deliveries).
    extracted = "body" not in d.columns
    read = [c for c in _EXTRACTED if c in d.columns] if extracted else ["body"]
    wide = [*EVENT_COLUMNS[:6], *read]
    ev = take_rows_emptying(d, wide, pos) if owned else take_rows(d[wide], pos)
    if extracted:  # fields extracted once at ingest (the evidence store)
        fields = pd.DataFrame({key: ev[col] for key, col in DATA_FIELDS})
        invalid = int(ev["data_invalid"].sum())
    else:
        fields, invalid = field_frame(parse_data(ev["body"].tolist()))
    cols: dict[str, pd.Series] = {c: ev[c] for c in EVENT_COLUMNS[:6]}
    unparsable = 0
    for key, col, kind in FIELDS:
        if kind == "time":
            cols[col], bad = parse_times(fields[key])
            unparsable += bad
        else:
            cols[col] = fields[key]
    counts["invalid_values"] = invalid
    counts["unparsable_times"] = unparsable
    return _typed(pd.DataFrame(cols), _EVENT_DTYPES, categories=categories), counts


# --------------------------------------------------------------------------------------------
# The rules (relational expressions; :mod:`audit.analysis.engine` runs them)
# --------------------------------------------------------------------------------------------


def as_of_table(as_of: pd.Timestamp) -> pa.Table:
    """The rules' ``settings``: one row, ``as_of`` (to the nanosecond, as the events' times)."""
    at = pa.array([as_of.value], pa.int64()).cast(pa.timestamp("ns", "UTC"))
    return pa.table({"as_of": at})


def strings(table: pa.Table) -> pa.Table:
    """``table`` with its categories (dictionaries) and untyped columns as Arrow strings: the
    rules read texts."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type) or pa.types.is_null(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.large_string()))
    return table


def copy_number(deliveries: ir.Table, ties: tuple[str, ...] = ("_row",)) -> ir.Value:
    """Each valid receipt's rank among the valid receipts of its event id (0: the first), by
    receipt time (none last), then the ``ties`` columns (``_row``: the frame's order)."""
    import ibis  # start-up: only an analysis needs it

    d = deliveries
    received = ibis.asc(d.received_at, nulls_first=False)
    return ibis.row_number().over(group_by=d.event_id, order_by=[received, *(d[c] for c in ties)])


def left_out(events: ir.Table, as_of: ir.Value) -> ir.Value:
    """Why an event (a first receipt) is left out of the fold, as its :data:`COUNT_KEYS` key
    (``test_events``, ``no_incident_id``, ``no_event_time``, ``after_as_of``), or ``events``
    when it is kept."""
    import ibis  # start-up: only an analysis needs it

    e = events
    test = (e.event == TEST_EVENT).fill_null(False) | e.incident_id.startswith(
        TEST_INCIDENT_PREFIX
    ).fill_null(False)
    return ibis.cases(
        (test, "test_events"),
        (e.incident_id.isnull(), "no_incident_id"),
        (e.event_timestamp.isnull(), "no_event_time"),
        (e.event_timestamp > as_of, "after_as_of"),
        else_="events",
    )


def event_order(events: ir.Table) -> list[ir.Value]:
    """The events' order: incident, time, first receipt (none last), event id."""
    import ibis  # start-up: only an analysis needs it

    received = ibis.asc(events.received_at, nulls_first=False)
    return [events.incident_id, events.event_timestamp, received, events.event_id]


def receipts_rule(deliveries: ir.Table, settings: ir.Table) -> ir.Table:
    """Each valid delivery with an event id (``deliveries``: :data:`FOLD_KEYS` and ``_row``)
    by its ``_row``, with ``bucket``: ``duplicates`` for a further copy of an event id
    (``_first_row``: its first receipt's ``_row``), else :func:`left_out`'s; the kept events
    first, in :func:`event_order`. ``settings``: one row, ``as_of``."""
    import ibis  # start-up: only an analysis needs it

    d = deliveries.filter((deliveries.verdict == "valid") & deliveries.event_id.notnull())
    d = d.mutate(_copy=copy_number(d))
    first = d._row.min(where=d._copy == 0).over(group_by=d.event_id)
    as_of = settings.as_of.max().as_scalar()
    bucket = ibis.ifelse(d._copy == 0, left_out(d, as_of), "duplicates")
    d = d.mutate(_first_row=first, bucket=bucket)
    keys = ["incident_id", "event_timestamp", "received_at", "event_id"]
    d = d.select("_row", "_first_row", "bucket", *keys)
    return d.order_by([ibis.desc(d.bucket == "events"), *event_order(d)])
