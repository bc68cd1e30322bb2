"""Incident state folded from the valid webhook events, and status intervals.

Only what the service really sent counts: rows whose ``verdict`` is ``valid``. A forged,
tampered or replayed request therefore never changes an incident. The same event reaches the
receiver several times (retries, slow acknowledgements, two subscriptions): events are
de-duplicated by the body's event ``id`` (the Delivery-Id header is not authenticated), keeping
the first valid receipt, and only that one body per event id is parsed. ``webhook.test`` events
and test incidents (``data.incidentId`` starting with ``test_``) are left out.

The fold
--------
The events of an incident are ordered by ``event_timestamp`` (the envelope's ``timestamp``;
ties are broken by first receipt, then event id), never by receipt: deliveries arrive out of
order. Each field of ``data`` takes its **last non-missing value** in that order; a field absent
from an event (or ``null`` in it) keeps the value of an earlier event; unknown fields are
ignored. Events stamped after ``as_of`` are ignored: the tables show the state as of ``as_of``.

Status intervals and suspected missed events
--------------------------------------------
Events that carry a ``status`` form a sequence; each maximal run of one status is an
*interval* that starts at the ``event_timestamp`` of the run's first event and ends where the
next run starts, or at ``as_of`` for the last one (even ``closed``). The spec says every status
change is announced by ``incident.status_changed`` (section 3.1). A run other than the first
of its incident, that holds **no** ``incident.status_changed`` event carrying its status, was
reached by a change that the receiver never saw: it counts as one *suspected missed event*
(an event whose every attempt failed, or was lost before reaching the receiver, leaves no other
trace on the receiver side). Equivalently: walking the events in order, a non-status_changed
event whose status differs from the previous known status counts once, unless a
status_changed event carrying that status follows before the status changes again (so a
status_changed stamped a little after, e.g. a history event of the new status, still announces
it; a return to a status announced earlier in the incident's life does not). A status_changed
event that brings a new status is never counted. The first run is never counted (the creation
is not a status change, and the incident may predate the captures). Limits of this evidence:
a missed change to a status that no later event shows is invisible (the transitions are not
published); and the count means something only when a subscription receives
``incident.status_changed``.

Everything is pure: no I/O, no clock; time enters as ``as_of``. Each returned frame carries the
counts of what was left out in ``frame.attrs["counts"]`` (see :func:`incident_events`).
"""

from __future__ import annotations

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

from audit.errors import SchemaError
from audit.spec import CLIENT_WAIT_STATUSES, TEST_EVENT
from audit.tables import DATA_FIELDS
from audit.timeutil import as_utc

__all__ = [
    "COUNT_KEYS",
    "EVENT_COLUMNS",
    "INCIDENT_TABLE_COLUMNS",
    "INTERVAL_COLUMNS",
    "incident_events",
    "incidents_table",
    "status_intervals",
]

CREATED = "incident.created"
STATUS_CHANGED = "incident.status_changed"
_UTC = "datetime64[ns, UTC]"

#: ``data`` field -> (column, kind). Kinds: text (a JSON string), wait (boolean or string),
#: time (an ISO 8601 string). ``historyEntry`` belongs to one event, not to the state.
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("clientId", "client_id", "text"),
    ("incidentClass", "incident_class", "text"),
    ("incidentType", "incident_type", "text"),
    ("source", "source", "text"),
    ("status", "status", "text"),
    ("domain", "domain", "text"),
    ("url", "url", "text"),
    ("safeDomain", "safe_domain", "text"),
    ("subject", "subject", "text"),
    ("reportedBy", "reported_by", "text"),
    ("waitForClient", "wait_for_client", "wait"),
    ("timestamp", "data_timestamp", "time"),
    ("lastHistoryUpdateTimestamp", "last_history_update_at", "time"),
    ("burnStartedTimestamp", "burn_started_at", "time"),
    ("takedownTimestamp", "takedown_timestamp", "time"),
)
_FIELD_COLUMNS = tuple(col for _, col, _ in _FIELDS)

EVENT_COLUMNS: tuple[str, ...] = (
    "incident_id",
    "event_id",
    "event",
    "event_timestamp",
    "received_at",
    "subscription_id",
    *_FIELD_COLUMNS,
)
"""Columns of :func:`incident_events`, in order."""

INCIDENT_TABLE_COLUMNS: tuple[str, ...] = (
    "incident_id",
    "client_id",
    "incident_class",
    "incident_type",
    "source",
    "status",
    "domain",
    "url",
    "safe_domain",
    "subject",
    "reported_by",
    "wait_for_client",
    "created_at",
    "created_at_inferred",
    "created_at_source",
    "burn_started_at",
    "takedown_at",
    "closed_at",
    "first_event_at",
    "last_event_at",
    "last_history_update_at",
    "time_to_takedown_s",
    "taken_down",
    "awaiting_client_s",
    "events",
    "suspected_missed_events",
    "missed_statuses",
)
"""Columns of :func:`incidents_table`, in order."""

INTERVAL_COLUMNS: tuple[str, ...] = (
    "incident_id",
    "status",
    "start",
    "end",
    "duration_s",
    "announced",
    "current",
)
"""Columns of :func:`status_intervals`, in order."""

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
    **{col: (_UTC if kind == "time" else "str") for _, col, kind in _FIELDS},
}
_TEXT_OUT = INCIDENT_TABLE_COLUMNS[1:12]
_INCIDENT_DTYPES: dict[str, str] = {
    "incident_id": "str",
    **dict.fromkeys(_TEXT_OUT, "str"),
    "created_at": _UTC,
    "created_at_inferred": "bool",
    "created_at_source": "str",
    "burn_started_at": _UTC,
    "takedown_at": _UTC,
    "closed_at": _UTC,
    "first_event_at": _UTC,
    "last_event_at": _UTC,
    "last_history_update_at": _UTC,
    "time_to_takedown_s": "float64",
    "taken_down": "bool",
    "awaiting_client_s": "float64",
    "events": "int64",
    "suspected_missed_events": "int64",
    "missed_statuses": "str",
}
_INTERVAL_DTYPES: dict[str, str] = {
    "incident_id": "str",
    "status": "str",
    "start": _UTC,
    "end": _UTC,
    "duration_s": "float64",
    "announced": "bool",
    "current": "bool",
}
_NEEDED = (
    "verdict",
    "subscription_id",
    "event_id",
    "event",
    "event_timestamp",
    "incident_id",
    "received_at",
)
#: Read from the store instead of the body (see audit.tables.STORED_DELIVERIES).
_EXTRACTED = ("body_sha256", "data_invalid", *(col for _, col in DATA_FIELDS))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _check_columns(deliveries: object) -> pd.DataFrame:
    if not isinstance(deliveries, pd.DataFrame):
        raise SchemaError(f"deliveries must be a DataFrame, got {type(deliveries).__name__}")
    missing = [c for c in _NEEDED if c not in deliveries.columns]
    if "body" not in deliveries.columns and not set(_EXTRACTED) <= set(deliveries.columns):
        missing.append("body")
    if missing:
        raise SchemaError(
            f"deliveries lacks column(s): {', '.join(missing)}; verify it first "
            "(audit.verification.verify_frame or audit_signatures)"
        )
    for name in ("event_timestamp", "received_at"):
        if not isinstance(deliveries[name].dtype, pd.DatetimeTZDtype):
            raise SchemaError(
                f"column {name!r} must be a timezone-aware datetime, got {deliveries[name].dtype}"
            )
    return deliveries


def _body_key(d: pd.DataFrame) -> str:
    """The column that tells copies apart: the body, or its sha256 when only that is loaded."""
    return "body" if "body" in d.columns else "body_sha256"


def _typed(df: pd.DataFrame, dtypes: dict[str, str]) -> pd.DataFrame:
    """Columns in schema order with the declared dtypes (times converted to UTC, ns)."""
    out = {}
    for name, dtype in dtypes.items():
        col = df[name] if name in df.columns else pd.Series(index=df.index, dtype=object)
        if col.dtype == dtype:
            pass
        elif dtype == _UTC:
            if not isinstance(col.dtype, pd.DatetimeTZDtype):
                col = pd.to_datetime(col, utc=True)
            col = col.dt.tz_convert("UTC").astype(_UTC)
        else:
            col = col.astype(dtype)
        out[name] = col
    return pd.DataFrame(out, index=df.index).reset_index(drop=True)


def _empty(dtypes: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


_MIN_NS = pd.Timestamp.min.tz_localize("UTC")
_MAX_NS = pd.Timestamp.max.tz_localize("UTC")


def _parse_times(raw: pd.Series) -> tuple[pd.Series, int]:
    """ISO 8601 strings to UTC ns; unparsable (or out of range) strings become NaT, counted."""
    parsed = pd.to_datetime(raw, utc=True, format="ISO8601", errors="coerce")
    parsed = parsed.where((parsed >= _MIN_NS) & (parsed <= _MAX_NS))
    bad = int((raw.notna() & parsed.isna()).sum())
    return parsed.astype(_UTC), bad


_STR = pd.StringDtype(na_value=np.nan)  # pandas' "str" dtype
_TO_STR = {pa.large_string(): _STR}.get
#: The string-valued fields, as one Arrow struct: pyarrow converts the parsed dicts in C++,
#: ignoring other keys, and refuses a value that is not a string (then the slow path counts it).
_STRING_KEYS = tuple(key for key, _, kind in _FIELDS if kind != "wait")
_STRUCT = pa.struct([(key, pa.large_string()) for key in _STRING_KEYS])


def _data_of(body: object) -> dict:
    try:
        env = orjson.loads(body)  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError):
        return {}
    data = env.get("data") if type(env) is dict else None
    return data if type(data) is dict else {}


def _parse_data(bodies: list[object]) -> list[dict]:
    """The ``data`` object of each body (``{}`` when there is none)."""
    try:  # fast path: every body is an envelope with a data object
        datas = [env["data"] for env in map(orjson.loads, bodies)]  # type: ignore[arg-type]
        if all(type(x) is dict for x in datas):
            return datas
    except (orjson.JSONDecodeError, TypeError, KeyError):
        pass
    return [_data_of(b) for b in bodies]


def _str_series(values: list[object]) -> tuple[pd.Series, int]:
    """Strings kept as ``str`` dtype; anything else (numbers, objects) becomes NaN, counted."""
    kept = [v if type(v) is str else None for v in values]
    arr = pa.array(kept, pa.large_string())
    return pd.Series(arr.to_pandas(types_mapper=_TO_STR)), kept.count(None) - values.count(None)


def _field_frame(datas: list[dict]) -> tuple[pd.DataFrame, int]:
    """Known fields of the ``data`` objects as columns (``data`` keys), and wrong-type count."""
    waits = [x.get("waitForClient") for x in datas]
    kept = [
        v if type(v) is str else ("true" if v else "false") if type(v) is bool else None
        for v in waits
    ]
    invalid = kept.count(None) - waits.count(None)
    try:
        arr = pa.array(datas, type=_STRUCT)
    except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):
        columns = {}
        for key in _STRING_KEYS:
            columns[key], bad = _str_series([x.get(key) for x in datas])
            invalid += bad
        frame = pd.DataFrame(columns)
    else:
        table = pa.Table.from_arrays(arr.flatten(), names=list(_STRING_KEYS))
        frame = table.to_pandas(types_mapper=_TO_STR)
    frame["waitForClient"] = _str_series(kept)[0]
    return frame, invalid


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


def incident_events(deliveries: pd.DataFrame, *, as_of: pd.Timestamp) -> pd.DataFrame:
    """One row per distinct valid incident event, with the fields of its ``data`` parsed.

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries frame (``docs/tables.md``); needs ``verdict, subscription_id,
        event_id, event, event_timestamp, incident_id, received_at, body``.
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


def _events(deliveries: pd.DataFrame, as_of: pd.Timestamp) -> tuple[pd.DataFrame, dict[str, int]]:
    """:func:`incident_events` without attrs (pandas deep-copies attrs on every operation)."""
    d = _check_columns(deliveries)
    counts = dict.fromkeys(COUNT_KEYS, 0)
    valid = (d["verdict"] == "valid").fillna(False).to_numpy(dtype=bool)
    counts["valid"] = int(valid.sum())
    idx = np.flatnonzero(valid & d["event_id"].notna().to_numpy())
    counts["no_event_id"] = counts["valid"] - len(idx)

    # The first valid receipt of each event id (ties: input order).
    received = d["received_at"].array.asi8[idx]
    received = np.where(received == np.iinfo(np.int64).min, np.iinfo(np.int64).max, received)
    idx = idx[np.argsort(received, kind="stable")]
    codes = pd.factorize(d["event_id"].iloc[idx])[0]
    first = np.unique(codes, return_index=True)[1]  # position of each event id's first receipt
    dup = np.ones(len(idx), dtype=bool)
    dup[first] = False
    counts["duplicates"] = int(dup.sum())
    if dup.any():  # same event id, different bytes: counted (the first receipt is used)
        bodies = d[_body_key(d)].to_numpy(dtype=object)[idx]
        differ = bodies[dup] != bodies[first[codes[dup]]]
        counts["conflicting_bodies"] = len(np.unique(codes[dup][differ]))
    extracted = "body" not in d.columns
    pos = idx[~dup]
    ev = d[["event", "incident_id", "event_timestamp"]].iloc[pos]

    is_test = (ev["event"] == TEST_EVENT).fillna(False).to_numpy(dtype=bool) | ev[
        "incident_id"
    ].str.startswith("test_").fillna(False).to_numpy(dtype=bool)
    no_inc = ev["incident_id"].isna().to_numpy() & ~is_test
    no_time = ev["event_timestamp"].isna().to_numpy() & ~is_test & ~no_inc
    late = (ev["event_timestamp"] > as_of).fillna(False).to_numpy(dtype=bool) & ~is_test & ~no_inc
    counts["test_events"] = int(is_test.sum())
    counts["no_incident_id"] = int(no_inc.sum())
    counts["no_event_time"] = int(no_time.sum())
    counts["after_as_of"] = int(late.sum())
    pos = pos[~(is_test | no_inc | no_time | late)]
    counts["events"] = len(pos)
    if not len(pos):
        return _empty(_EVENT_DTYPES), counts

    # Sorted on the key columns alone, then every column taken once (filtering and sorting the
    # wide frame copied each extracted field twice: about 0.4 GB per copy at 1M deliveries).
    sort_keys = ["incident_id", "event_timestamp", "received_at", "event_id"]
    keys = d[sort_keys].iloc[pos].reset_index(drop=True)
    order = keys.sort_values(sort_keys, kind="stable").index.to_numpy()
    wide = [*EVENT_COLUMNS[:6], *(_EXTRACTED if extracted else ("body",))]
    ev = d[wide].iloc[pos[order]].reset_index(drop=True)
    if extracted:  # fields extracted once at ingest (the evidence store)
        fields = pd.DataFrame({key: ev[col] for key, col in DATA_FIELDS})
        invalid = int(ev["data_invalid"].sum())
    else:
        fields, invalid = _field_frame(_parse_data(ev["body"].tolist()))
    cols: dict[str, pd.Series] = {c: ev[c] for c in EVENT_COLUMNS[:6]}
    unparsable = 0
    for key, col, kind in _FIELDS:
        if kind == "time":
            cols[col], bad = _parse_times(fields[key])
            unparsable += bad
        else:
            cols[col] = fields[key]
    counts["invalid_values"] = invalid
    counts["unparsable_times"] = unparsable
    return _typed(pd.DataFrame(cols), _EVENT_DTYPES), counts


# --------------------------------------------------------------------------------------------
# Status intervals
# --------------------------------------------------------------------------------------------


def _intervals(events: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """Status runs of sorted events, plus a private ``first`` column (first run of its incident)."""
    st = events[events["status"].notna().to_numpy()]
    if st.empty:
        return _empty(_INTERVAL_DTYPES).assign(first=pd.Series([], dtype=bool))
    inc = st["incident_id"].to_numpy(dtype=object)
    status = st["status"].to_numpy(dtype=object)
    new_inc = np.ones(len(st), dtype=bool)
    new_inc[1:] = inc[1:] != inc[:-1]
    new_run = new_inc.copy()
    new_run[1:] |= status[1:] != status[:-1]
    heads = np.flatnonzero(new_run)
    announces = (st["event"] == STATUS_CHANGED).fillna(False).to_numpy(dtype=bool)
    first = new_inc[heads]
    current = np.ones(len(heads), dtype=bool)
    current[:-1] = first[1:]  # the next run opens another incident
    start = st["event_timestamp"].iloc[heads].reset_index(drop=True)
    runs = pd.DataFrame(
        {
            "incident_id": inc[heads],
            "status": status[heads],
            "start": start,
            "end": start.shift(-1).where(~current, as_of),
            "announced": np.logical_or.reduceat(announces, heads),
            "current": current,
        }
    )
    runs["duration_s"] = (runs["end"] - runs["start"]).dt.total_seconds()
    return _typed(runs, _INTERVAL_DTYPES).assign(first=first)


def status_intervals(deliveries: pd.DataFrame, *, as_of: pd.Timestamp) -> pd.DataFrame:
    """Each incident's status intervals, the last one open until ``as_of``.

    A new interval starts at the ``event_timestamp`` of each event whose status differs from
    the previous known status of the incident (events without a status carry it on); it ends
    where the next starts. See the module docstring for the rules.

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries frame (see :func:`incident_events`).
    as_of : pandas.Timestamp
        Timezone-aware; the end of every incident's last interval.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`INTERVAL_COLUMNS`, sorted by incident and start: ``incident_id,
        status`` (str), ``start, end`` (``datetime64[ns, UTC]``), ``duration_s`` (float64),
        ``announced`` (bool: an ``incident.status_changed`` event of the run carries the
        status; False on a later run is a suspected missed event, and False is normal on an
        incident's first run) and ``current`` (bool: the last interval, ended by ``as_of``).
        ``attrs["counts"]`` as in :func:`incident_events`.

    Examples
    --------
    >>> as_of = pd.Timestamp("2026-11-01", tz="UTC")
    >>> iv = status_intervals(verified, as_of=as_of)  # doctest: +SKIP
    >>> iv[["incident_id", "status", "duration_s"]].head(2)  # doctest: +SKIP
    """
    as_of = as_utc(as_of)
    events, counts = _events(deliveries, as_of)
    out = _intervals(events, as_of).drop(columns="first")
    out.attrs["counts"] = counts
    return out


# --------------------------------------------------------------------------------------------
# Incidents
# --------------------------------------------------------------------------------------------


def _first_time(events: pd.DataFrame, mask: pd.Series | np.ndarray) -> pd.Series:
    """Per incident, the earliest event_timestamp among the masked events."""
    sel = events[np.asarray(mask, dtype=bool)]
    return sel.groupby("incident_id", sort=True)["event_timestamp"].min()


def incidents_table(deliveries: pd.DataFrame, *, as_of: pd.Timestamp) -> pd.DataFrame:
    """One row per incident: its state folded from the valid, de-duplicated events.

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries frame (see :func:`incident_events`).
    as_of : pandas.Timestamp
        Timezone-aware. The state is the one known at ``as_of``: later events are ignored, and
        the current status interval runs until ``as_of``.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`INCIDENT_TABLE_COLUMNS`, sorted by ``incident_id``:

        - ``client_id, incident_class, incident_type, source, status, domain, url, safe_domain,
          subject, reported_by`` (str): each the last non-missing value in event order. These
          are attacker-influenced texts (phishing URLs): escape and defang them in reports.
        - ``wait_for_client`` (str): the last non-missing ``waitForClient``, ``"true"`` or
          ``"false"`` for a boolean, else the reason string as sent. The service omits the
          field when it does not apply, so the last value sent can outlive the wait: read
          ``status`` and ``awaiting_client_s`` for the current wait.
        - ``created_at``: ``data.timestamp``; else the first ``incident.created`` event's time;
          else the first event's time. ``created_at_inferred`` (bool) is True when it is not
          ``data.timestamp``; ``created_at_source`` names the source (``data.timestamp``,
          ``incident.created`` or ``first_event``).
        - ``burn_started_at``: ``data.burnStartedTimestamp`` (no fallback).
        - ``takedown_at``: ``data.takedownTimestamp``; else the time of the first event whose
          status is ``takedown_success``.
        - ``closed_at``: the time of the first event whose status is ``closed``.
        - ``first_event_at``, ``last_event_at``: first and last event times;
          ``last_history_update_at``: ``data.lastHistoryUpdateTimestamp``.
        - ``time_to_takedown_s`` (float64): ``takedown_at - created_at`` in seconds when taken
          down, else NaN. ``taken_down`` (bool): ``takedown_at`` is known and not after
          ``as_of``.
        - ``awaiting_client_s`` (float64): seconds spent in ``approval_required`` or
          ``action_required`` (:data:`audit.spec.CLIENT_WAIT_STATUSES`), the current interval
          counted up to ``as_of``; NaN when no event carries a status.
        - ``events`` (int64): distinct events folded.
        - ``suspected_missed_events`` (int64): status intervals (after the first) that no
          ``incident.status_changed`` announced; ``missed_statuses`` (str): their statuses in
          order, comma-joined (``""`` when none).

        ``attrs["counts"]`` as in :func:`incident_events`.

    Raises
    ------
    ParameterError
        ``as_of`` is naive or not a timestamp.
    SchemaError
        A needed column is missing, or a time column is not tz-aware.

    Examples
    --------
    >>> as_of = pd.Timestamp("2026-11-01", tz="UTC")
    >>> inc = incidents_table(verified, as_of=as_of)  # doctest: +SKIP
    >>> from audit.takedown import takedown_durations
    >>> durations, exclusions, _ = takedown_durations(inc, as_of=as_of)  # doctest: +SKIP
    """
    as_of = as_utc(as_of)
    events, counts = _events(deliveries, as_of)
    if events.empty:
        out = _empty(_INCIDENT_DTYPES)
        out.attrs["counts"] = counts
        return out

    by = events.groupby("incident_id", sort=True)
    folded = by[list(_FIELD_COLUMNS)].last()  # last non-missing value of each field
    times = by["event_timestamp"]
    out = folded.drop(columns=["data_timestamp", "takedown_timestamp"])
    out["first_event_at"] = times.min()
    out["last_event_at"] = times.max()
    out["events"] = by.size()

    created_event = _first_time(events, events["event"] == CREATED).reindex(out.index)
    data_ts = folded["data_timestamp"]
    out["created_at"] = data_ts.fillna(created_event).fillna(out["first_event_at"])
    source = np.where(
        data_ts.notna(),
        "data.timestamp",
        np.where(created_event.notna(), "incident.created", "first_event"),
    )
    out["created_at_source"] = source
    out["created_at_inferred"] = data_ts.isna()

    status = events["status"]
    success_at = _first_time(events, status == "takedown_success").reindex(out.index)
    out["takedown_at"] = folded["takedown_timestamp"].fillna(success_at)
    out["closed_at"] = _first_time(events, status == "closed").reindex(out.index)
    taken = out["takedown_at"].notna() & (out["takedown_at"] <= as_of)
    out["taken_down"] = taken
    ttd = (out["takedown_at"] - out["created_at"]).dt.total_seconds()
    out["time_to_takedown_s"] = ttd.where(taken)

    runs = _intervals(events, as_of)
    waiting = runs[np.isin(runs["status"].to_numpy(dtype=object), CLIENT_WAIT_STATUSES)]
    wait_s = waiting.groupby("incident_id")["duration_s"].sum()
    has_status = folded["status"].notna()  # some event carries a status
    out["awaiting_client_s"] = wait_s.reindex(out.index).fillna(0.0).where(has_status)
    missed = runs[(~runs["announced"] & ~runs["first"]).to_numpy()]
    out["suspected_missed_events"] = (
        missed.groupby("incident_id").size().reindex(out.index).fillna(0).astype("int64")
    )
    joined = missed.groupby("incident_id")["status"].agg(",".join) if len(missed) else None
    out["missed_statuses"] = "" if joined is None else joined.reindex(out.index).fillna("")

    result = _typed(out.reset_index(), _INCIDENT_DTYPES)
    result.attrs["counts"] = counts
    return result
