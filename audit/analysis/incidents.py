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

from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from audit.analysis.engine import frame_of, run
from audit.analysis.event_fields import FIELD_COLUMNS
from audit.analysis.incident_events import (
    COUNT_KEYS,
    CREATED,
    EVENT_COLUMNS,
    STATUS_CHANGED,
    FirstReceipts,
    _events,
    as_of_table,
    event_order,
    incident_events,
    strings,
)
from audit.spec import CLIENT_WAIT_STATUSES
from audit.tables import INCIDENTS, STATUS_INTERVALS
from audit.timeutil import as_utc

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "COUNT_KEYS",
    "EVENT_COLUMNS",
    "INCIDENT_TABLE_COLUMNS",
    "INTERVAL_COLUMNS",
    "fold_rule",
    "incident_events",
    "incidents_and_intervals",
    "incidents_rule",
    "incidents_table",
    "intervals_rule",
    "status_intervals",
]

INCIDENT_TABLE_COLUMNS: tuple[str, ...] = tuple(INCIDENTS.names)
"""Columns of :func:`incidents_table`, in order."""

INTERVAL_COLUMNS: tuple[str, ...] = tuple(STATUS_INTERVALS.names)
"""Columns of :func:`status_intervals`, in order."""

#: The text fields an incident keeps: its ``data`` fields that are not times.


# --------------------------------------------------------------------------------------------
# Status intervals
# --------------------------------------------------------------------------------------------


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
    >>> import json
    >>> def body(n, event, status):  # an envelope: its event id, event and data
    ...     data = {"status": status, "incidentClass": "phishing"}
    ...     return json.dumps({"id": f"evt_{n}", "event": event, "data": data}).encode()
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # an incident created, then taken down 6 hours later
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": ["evt_1", "evt_2"],
    ...     "event": ["incident.created", "incident.status_changed"], "incident_id": "inc_1",
    ...     "event_timestamp": [t, t + pd.Timedelta("6h")],
    ...     "received_at": [t, t + pd.Timedelta("6h")],
    ...     "body": [body(1, "incident.created", "new"),
    ...              body(2, "incident.status_changed", "takedown_success")]})
    >>> as_of = pd.Timestamp("2026-11-01", tz="UTC")
    >>> iv = status_intervals(verified, as_of=as_of)
    >>> print(iv[["incident_id", "status", "duration_s", "current"]].to_string(index=False))
    incident_id           status  duration_s  current
          inc_1              new     21600.0    False
          inc_1 takedown_success   2613600.0     True
    """
    return incidents_and_intervals(deliveries, as_of=as_of, incidents=False)[1]


# --------------------------------------------------------------------------------------------
# Incidents


# --------------------------------------------------------------------------------------------
# Incidents
# --------------------------------------------------------------------------------------------


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
    >>> import json
    >>> def body(n, event, status):  # an envelope: its event id, event and data
    ...     data = {"status": status, "incidentClass": "phishing"}
    ...     return json.dumps({"id": f"evt_{n}", "event": event, "data": data}).encode()
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # an incident created, then taken down 6 hours later
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": ["evt_1", "evt_2"],
    ...     "event": ["incident.created", "incident.status_changed"], "incident_id": "inc_1",
    ...     "event_timestamp": [t, t + pd.Timedelta("6h")],
    ...     "received_at": [t, t + pd.Timedelta("6h")],
    ...     "body": [body(1, "incident.created", "new"),
    ...              body(2, "incident.status_changed", "takedown_success")]})
    >>> as_of = pd.Timestamp("2026-11-01", tz="UTC")
    >>> inc = incidents_table(verified, as_of=as_of)
    >>> print(inc[["incident_id", "status", "taken_down", "time_to_takedown_s"]].to_string())
      incident_id            status  taken_down  time_to_takedown_s
    0       inc_1  takedown_success        True             21600.0
    >>> from audit.analysis.takedown import takedown_durations
    >>> durations, exclusions, _ = takedown_durations(inc, as_of=as_of)
    >>> durations[["duration_s", "observed"]].to_dict("records")
    [{'duration_s': 21600.0, 'observed': True}]
    """
    return incidents_and_intervals(deliveries, as_of=as_of)[0]


def incidents_and_intervals(
    deliveries: pd.DataFrame | FirstReceipts, *, as_of: pd.Timestamp, incidents: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`incidents_table` and :func:`status_intervals` from one reading of the events
    (each alone reads them again). ``deliveries`` may be :class:`FirstReceipts` (taken over);
    ``incidents=False``: the status intervals only (the first table is then empty)."""
    as_of = as_utc(as_of)
    events, counts = _events(deliveries, as_of, categories=True)
    tables = {"events": _event_input(events), "settings": as_of_table(as_of)}
    del events
    runs = run(intervals_rule, tables)
    intervals = frame_of(runs.drop_columns("_run"), STATUS_INTERVALS)
    intervals.attrs["counts"] = counts
    if incidents:
        result = frame_of(run(incidents_rule, {**tables, "runs": runs}), INCIDENTS)
    else:
        result = INCIDENTS.empty()
    result.attrs["counts"] = counts
    return result, intervals


#: The columns of the events the rules read.
_EVENT_INPUTS = ("incident_id", "event_id", "event", "event_timestamp", "received_at")


def _event_input(events: pd.DataFrame) -> pa.Table:
    """The events (:func:`incident_events`' columns) as the rules' input: texts (categories
    too) as Arrow strings, times in nanoseconds, UTC."""
    columns = [*_EVENT_INPUTS, *FIELD_COLUMNS]
    return strings(pa.Table.from_pandas(events[columns], preserve_index=False))


# --------------------------------------------------------------------------------------------
# The rules (one relational expression each; :mod:`audit.analysis.engine` runs them)
# --------------------------------------------------------------------------------------------


def _seconds(end: ir.Value, start: ir.Value) -> ir.Value:
    """``end - start`` in seconds (float; to the microsecond)."""
    return end.delta(start, unit="microsecond").cast("float64") / 1e6


def intervals_rule(events: ir.Table, settings: ir.Table) -> ir.Table:
    """The status runs of :func:`status_intervals` as one relational expression, with ``_run``
    (the run's number in its incident, from 1), sorted by incident and run.

    ``events``: the kept events (``incident_id, event_id, event, event_timestamp, received_at,
    status``); ``settings``: one row, ``as_of`` (the end of every incident's last run). A run
    starts where the status differs from the one before in event order (:func:`_event_order`).
    """
    import ibis  # start-up: only an analysis needs it

    st = events.filter(events.status.notnull())
    ordered = ibis.window(group_by=st.incident_id, order_by=event_order(st))
    new = (st.status != st.status.lag().over(ordered)).fill_null(True)
    st = st.mutate(_new=new.cast("int64"))
    st = st.mutate(_run=st._new.cumsum().over(ordered))
    runs = st.group_by(["incident_id", "_run"]).aggregate(
        status=st.status.max(),
        start=st.event_timestamp.min(),
        announced=(st.event == STATUS_CHANGED).fill_null(False).any(),
    )
    runs = runs.cross_join(settings.select("as_of"))
    then = runs.start.lead().over(ibis.window(group_by=runs.incident_id, order_by=runs._run))
    runs = runs.mutate(current=then.isnull(), end=then.fill_null(runs.as_of))
    return runs.select(
        "incident_id",
        "status",
        "start",
        "end",
        duration_s=_seconds(runs.end, runs.start),
        announced=runs.announced,
        current=runs.current,
        _run=runs._run,
    ).order_by(["incident_id", "_run"])


def fold_rule(events: ir.Table, settings: ir.Table) -> ir.Table:
    """The fold of :func:`incidents_table` without the status runs: one row per incident,
    sorted by ``incident_id``, with each field of ``events`` among :data:`FIELD_COLUMNS` (its
    last non-missing value in event order), ``first_event_at, last_event_at, events``,
    ``created_at`` (and its source), ``takedown_at``, ``closed_at``, ``taken_down`` and
    ``time_to_takedown_s``.

    ``events``: the kept events (``incident_id, event_id, event, event_timestamp,
    received_at, status, data_timestamp, takedown_timestamp`` and any of the other fields;
    times as timestamps, a time that does not parse missing); ``settings``: one row,
    ``as_of``.
    """
    import ibis  # start-up: only an analysis needs it

    e = events
    e = e.mutate(_seq=ibis.row_number().over(group_by=e.incident_id, order_by=event_order(e)))
    fields = [c for c in FIELD_COLUMNS if c in e.columns]
    status = e.status
    f = e.group_by("incident_id").aggregate(
        **{c: e[c].argmax(e._seq, where=e[c].notnull()) for c in fields},
        first_event_at=e.event_timestamp.min(),
        last_event_at=e.event_timestamp.max(),
        events=e.count(),
        _created=e.event_timestamp.min(where=e.event == CREATED),
        _success=e.event_timestamp.min(where=status == "takedown_success"),
        closed_at=e.event_timestamp.min(where=status == "closed"),
    )
    f = f.cross_join(settings.select("as_of"))
    stamped = f.data_timestamp
    f = f.mutate(
        created_at=ibis.coalesce(stamped, f._created, f.first_event_at),
        created_at_source=ibis.cases(
            (stamped.notnull(), "data.timestamp"),
            (f._created.notnull(), "incident.created"),
            else_="first_event",
        ),
        created_at_inferred=stamped.isnull(),
        takedown_at=ibis.coalesce(f.takedown_timestamp, f._success),
    )
    taken = (f.takedown_at.notnull() & (f.takedown_at <= f.as_of)).fill_null(False)
    f = f.mutate(
        taken_down=taken,
        time_to_takedown_s=ibis.ifelse(taken, _seconds(f.takedown_at, f.created_at), None),
    )
    return f.drop("as_of", "_created", "_success").order_by("incident_id")


def incidents_rule(events: ir.Table, runs: ir.Table, settings: ir.Table) -> ir.Table:
    """The rows of :func:`incidents_table` (columns :data:`INCIDENT_TABLE_COLUMNS`, sorted by
    ``incident_id``): :func:`fold_rule` with what the status runs ``runs`` (the result of
    :func:`intervals_rule` over the same inputs) say of each incident. Inputs as
    :func:`fold_rule`'s, with every field."""
    import ibis  # start-up: only an analysis needs it

    waiting = runs.status.isin(CLIENT_WAIT_STATUSES)
    missed = ~runs.announced & (runs._run > 1)
    said = ibis.struct({"run": runs._run, "status": runs.status})
    per = runs.group_by("incident_id").aggregate(
        _wait=runs.duration_s.sum(where=waiting),
        _missed=missed.cast("int64").sum(),
        _statuses=said.collect(where=missed).sort().map(lambda s: s.status).join(","),
    )
    f = fold_rule(events, settings)
    f = f.left_join(per, "incident_id").drop("incident_id_right")
    has_status = f.status.notnull()
    f = f.mutate(
        awaiting_client_s=ibis.ifelse(has_status, f._wait.fill_null(0.0), None),
        suspected_missed_events=f._missed.fill_null(0),
        missed_statuses=f._statuses.fill_null(""),
    )
    return f.select(*INCIDENT_TABLE_COLUMNS).order_by("incident_id")
