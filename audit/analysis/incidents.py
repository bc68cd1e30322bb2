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
import pandas as pd

from audit.analysis.event_fields import FIELD_COLUMNS, FIELDS
from audit.analysis.incident_events import (
    COUNT_KEYS,
    CREATED,
    EVENT_COLUMNS,
    STATUS_CHANGED,
    FirstReceipts,
    _empty,
    _events,
    _typed,
    incident_events,
)
from audit.analysis.rows import value_changes
from audit.spec import CLIENT_WAIT_STATUSES
from audit.tables import INCIDENTS, STATUS_INTERVALS
from audit.timeutil import as_utc

__all__ = [
    "COUNT_KEYS",
    "EVENT_COLUMNS",
    "INCIDENT_TABLE_COLUMNS",
    "INTERVAL_COLUMNS",
    "incident_events",
    "incidents_and_intervals",
    "incidents_table",
    "status_intervals",
]

INCIDENT_TABLE_COLUMNS: tuple[str, ...] = tuple(INCIDENTS.names)
"""Columns of :func:`incidents_table`, in order."""

INTERVAL_COLUMNS: tuple[str, ...] = tuple(STATUS_INTERVALS.names)
"""Columns of :func:`status_intervals`, in order."""

#: The text fields an incident keeps: its ``data`` fields that are not times.
_TEXT_OUT = tuple(col for _, col, kind in FIELDS if kind != "time")
_INCIDENT_DTYPES = INCIDENTS.dtypes()
_INTERVAL_DTYPES = STATUS_INTERVALS.dtypes()


# --------------------------------------------------------------------------------------------
# Status intervals
# --------------------------------------------------------------------------------------------


def _intervals(events: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """Status runs of sorted events, plus a private ``first`` column (first run of its incident)."""
    # Only the columns used: filtering the whole events frame copied every field of it.
    cols = ["incident_id", "status", "event", "event_timestamp"]
    st = events[cols][events["status"].notna().to_numpy()]
    if st.empty:
        return _empty(_INTERVAL_DTYPES).assign(first=pd.Series([], dtype=bool))
    new_inc = value_changes(st["incident_id"])  # compared without a Python string per row
    new_run = new_inc | value_changes(st["status"])
    heads = np.flatnonzero(new_run)
    announces = (st["event"] == STATUS_CHANGED).fillna(False).to_numpy(dtype=bool)
    first = new_inc[heads]
    current = np.ones(len(heads), dtype=bool)
    current[:-1] = first[1:]  # the next run opens another incident
    start = st["event_timestamp"].iloc[heads].reset_index(drop=True)
    runs = pd.DataFrame(
        {
            "incident_id": st["incident_id"].iloc[heads].reset_index(drop=True),
            "status": st["status"].iloc[heads].reset_index(drop=True),
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
    as_of = as_utc(as_of)
    events, counts = _events(deliveries, as_of, categories=True)
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
    deliveries: pd.DataFrame | FirstReceipts, *, as_of: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`incidents_table` and :func:`status_intervals` from one fold of the events (each
    alone folds them again). ``deliveries`` may be :class:`FirstReceipts` (taken over)."""
    as_of = as_utc(as_of)
    events, counts = _events(deliveries, as_of, categories=True)
    runs = _intervals(events, as_of)
    intervals = runs.drop(columns="first")
    intervals.attrs["counts"] = counts
    if events.empty:
        out = _empty(_INCIDENT_DTYPES)
        out.attrs["counts"] = counts
        return out, intervals
    result = _fold(events, runs, as_of)
    result.attrs["counts"] = counts
    return result, intervals


def _fold(events: pd.DataFrame, runs: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """The incidents table from the events and their status runs (see :func:`incidents_table`)."""
    by = events.groupby("incident_id", sort=True)
    folded = by[list(FIELD_COLUMNS)].last()  # last non-missing value of each field
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

    waiting = runs[runs["status"].isin(CLIENT_WAIT_STATUSES).to_numpy(dtype=bool)]
    wait_s = waiting.groupby("incident_id")["duration_s"].sum()
    has_status = folded["status"].notna()  # some event carries a status
    out["awaiting_client_s"] = wait_s.reindex(out.index).fillna(0.0).where(has_status)
    missed = runs[(~runs["announced"] & ~runs["first"]).to_numpy()]
    out["suspected_missed_events"] = (
        missed.groupby("incident_id").size().reindex(out.index).fillna(0).astype("int64")
    )
    joined = missed.groupby("incident_id")["status"].agg(",".join) if len(missed) else None
    out["missed_statuses"] = "" if joined is None else joined.reindex(out.index).fillna("")

    return _typed(out.reset_index(), _INCIDENT_DTYPES)
