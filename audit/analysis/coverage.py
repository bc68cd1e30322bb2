"""Coverage: which days (and hours) of a period held captures, the gaps, and whether the
requests verified at all.

Two small pure functions over the deliveries table, with explicit bounds (no wall clock); the
controls (CAP-01, SIG-01, SIG-02), the report's header and ``audit.open`` use them:

- :func:`capture_coverage` -- the days and hours of ``[start, min(end, as_of))`` (UTC) that
  held a capture (a record with a receipt time, whatever its verdict), and the **gaps**: spans
  of at least :data:`MIN_GAP` (24 h) with no capture, counted from the window's start, from
  capture to capture, and to the window's end. Gaps are judged only when the period's median
  day held captures, or the median of its days outside the longest run of days without a
  capture did, that run being at least as long as the others together (``judged``: one
  outage longer than half the period is still an outage); a quiet
  receiver, whose days held none at the median either way, has days without captures as its
  normal state and is not judged for gaps.
- :func:`verification_coverage` -- per subscription, the readable requests and how many failed
  verification with ``rotated_secret`` or ``signature_mismatch``; a subscription whose
  requests mostly fail with one of them (at least :data:`SUSPECT_SHARE` of its readable
  requests and at least :data:`SUSPECT_MIN` requests) is a **suspect**: the secrets file,
  not the receiver, is the likely cause.

Both return plain JSON-able mappings (they go into the run's manifest as they are).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "FAILED_VERIFICATION",
    "MIN_GAP",
    "SUSPECT_MIN",
    "SUSPECT_SHARE",
    "capture_coverage",
    "coverage_alerts",
    "secrets_sentence",
    "suspect_subscriptions",
    "verification_coverage",
]

#: A span without any capture at least this long is a gap (when the median day had captures).
MIN_GAP = pd.Timedelta(hours=24)
#: The verdicts that, dominating a subscription's requests, point at the secrets file.
FAILED_VERIFICATION = ("rotated_secret", "signature_mismatch")
#: A subscription is a suspect when at least this share of its readable requests ...
SUSPECT_SHARE = 0.5
#: ... and at least this many of them failed verification with the same one reason.
SUSPECT_MIN = 20

_DAY = pd.Timedelta(days=1)
_HOUR = pd.Timedelta(hours=1)


def _window(start: pd.Timestamp, end: pd.Timestamp, as_of: pd.Timestamp) -> pd.Timestamp:
    """The end of the judged window: the period's end, or ``as_of`` when earlier."""
    return max(start, min(end, as_of))


def _iso(t: pd.Timestamp) -> str:
    return pd.Timestamp(t).tz_convert("UTC").isoformat()


def _runs(days: list[pd.Timestamp]) -> list[list[str]]:
    """Consecutive days as ``[first, last]`` pairs of dates (YYYY-MM-DD).

    >>> d = pd.to_datetime(["2026-10-10", "2026-10-11", "2026-10-20"], utc=True)
    >>> _runs(list(d))
    [['2026-10-10', '2026-10-11'], ['2026-10-20', '2026-10-20']]
    """
    out: list[list[pd.Timestamp]] = []
    for day in days:
        if out and day - out[-1][1] == _DAY:
            out[-1][1] = day
        else:
            out.append([day, day])
    return [[f"{a:%Y-%m-%d}", f"{b:%Y-%m-%d}"] for a, b in out]


def _per(
    times: pd.Series, start: pd.Timestamp, stop: pd.Timestamp, unit: str
) -> tuple[pd.DatetimeIndex, np.ndarray]:
    """The UTC days (``unit`` "D") or hours ("h") that overlap ``[start, stop)`` and the
    captures of each (``times``: inside the window, UTC)."""
    if stop <= start:
        return pd.DatetimeIndex([], tz="UTC"), np.zeros(0, dtype="int64")
    slots = pd.date_range(start.floor(unit), stop, freq=unit, inclusive="left")
    held = times.dt.floor(unit).value_counts()
    return slots, held.reindex(slots, fill_value=0).to_numpy(dtype="int64")


def _median_outside_longest_quiet(day_counts: np.ndarray) -> float:
    """The median captures per day over the days outside the longest run of days without a
    capture, when that run holds at least as many days as every other such run together (one
    outage, not a quiet receiver's scattered days); else, or when no day is left, 0.0. One
    outage longer than half the period must not make the receiver look quiet.

    >>> _median_outside_longest_quiet(np.array([5, 6, 0, 0, 0, 0, 0, 4, 0]))  # of 5, 6, 4, 0
    4.5
    >>> _median_outside_longest_quiet(np.array([1, 0, 0, 1, 0, 0, 1, 0]))  # a quiet receiver
    0.0
    """
    empty = np.concatenate([[0], (day_counts == 0).astype("int8"), [0]])
    starts = np.flatnonzero(np.diff(empty) == 1)
    lengths = np.flatnonzero(np.diff(empty) == -1) - starts
    if not len(starts):
        return float(np.median(day_counts)) if len(day_counts) else 0.0
    longest = int(np.argmax(lengths))  # the first longest
    if lengths[longest] < lengths.sum() - lengths[longest]:
        return 0.0
    first, stop = starts[longest], starts[longest] + lengths[longest]
    rest = np.concatenate([day_counts[:first], day_counts[stop:]])
    return float(np.median(rest)) if len(rest) else 0.0


def capture_coverage(
    received_at: pd.Series,
    *,
    start: pd.Timestamp,
    end: pd.Timestamp,
    as_of: pd.Timestamp,
) -> dict[str, Any]:
    """Which UTC days and hours of ``[start, min(end, as_of))`` held captures, and the gaps.

    A capture received at ``as_of`` itself (before ``end``) counts too, with its day and hour:
    the analysis keeps every receipt up to and including ``as_of``, which defaults to the
    latest receipt.

    ``received_at``: the receipt times of the captured records (the deliveries table's column,
    any verdict; missing times, unreadable lines, are left out). All bounds are UTC-aware.

    Returns a mapping: ``window`` (start and end judged, ISO), ``days`` (days of the window,
    a partial first or last day included), ``days_with_captures``, ``days_without`` (runs of
    consecutive days without a capture, ``[first, last]`` dates), ``median_per_day`` (captures
    of the median day), ``judged`` (the median day held captures, or the median day outside
    the longest run of days without one did: gaps are judged), ``hours``,
    ``hours_with_captures``, ``busy`` (the median hour held captures), ``captures``, and
    ``gaps``: every span of at least 24 h without a capture (``start``, ``end``: the captures,
    or the window's bounds, around it; ``hours``; ``days_without``: the whole days inside it as
    ``[first, last]``, or None), empty when not ``judged``.

    >>> t = pd.to_datetime(["2026-10-01T10:00Z", "2026-10-02T09:00Z", "2026-10-05T12:00Z",
    ...                     "2026-10-06T08:00Z"])
    >>> c = capture_coverage(pd.Series(t), start=pd.Timestamp("2026-10-01", tz="UTC"),
    ...                      end=pd.Timestamp("2026-10-07", tz="UTC"),
    ...                      as_of=pd.Timestamp("2026-10-07", tz="UTC"))
    >>> c["days"], c["days_with_captures"], c["days_without"], c["judged"]
    (6, 4, [['2026-10-03', '2026-10-04']], True)
    >>> [(g["start"][:16], g["end"][:16], g["hours"], g["days_without"]) for g in c["gaps"]]
    [('2026-10-02T09:00', '2026-10-05T12:00', 75.0, ['2026-10-03', '2026-10-04'])]
    """
    stop = _window(start, end, as_of)
    times = received_at.dropna()
    times = pd.Series(pd.to_datetime(times, utc=True))
    # A capture received at as_of itself is in the data (the analysis keeps receipts up to
    # and including as_of, and as_of defaults to the latest one): it counts, with its day.
    inside = (times >= start) & (times < end) & (times <= as_of)
    times = times[inside].sort_values()
    last = stop + pd.Timedelta(1, "ns") if len(times) and times.iloc[-1] >= stop else stop
    days, day_counts = _per(times, start, last, "D")
    _, hour_counts = _per(times, start, last, "h")
    median_day = float(np.median(day_counts)) if len(day_counts) else 0.0
    judged = median_day > 0 or _median_outside_longest_quiet(day_counts) > 0
    gaps: list[dict[str, Any]] = []
    if judged:
        ns = pd.DatetimeIndex(times).as_unit("ns").asi8
        edges = np.concatenate([[start.as_unit("ns").value], ns, [stop.as_unit("ns").value]])
        for i in np.flatnonzero(np.diff(edges) >= MIN_GAP.value) + 1:
            a, b = pd.Timestamp(int(edges[i - 1]), tz="UTC"), pd.Timestamp(int(edges[i]), tz="UTC")
            whole_first = a.ceil("D")
            if i > 1 and whole_first == a:  # a capture at midnight: its day held it
                whole_first += _DAY
            whole_last = b.floor("D") - _DAY
            gaps.append(
                {
                    "start": _iso(a),
                    "end": _iso(b),
                    "hours": round((b - a) / _HOUR, 2),
                    "days_without": (
                        [f"{whole_first:%Y-%m-%d}", f"{whole_last:%Y-%m-%d}"]
                        if whole_first <= whole_last
                        else None
                    ),
                }
            )
    return {
        "window": {"start": _iso(start), "end": _iso(stop)},
        "captures": len(times),
        "days": len(day_counts),
        "days_with_captures": int((day_counts > 0).sum()),
        "days_without": _runs([d for d, n in zip(days, day_counts, strict=True) if n == 0]),
        "median_per_day": median_day,
        "judged": judged,
        "hours": len(hour_counts),
        "hours_with_captures": int((hour_counts > 0).sum()),
        "busy": bool(len(hour_counts)) and float(np.median(hour_counts)) > 0,
        "gaps": gaps,
    }


def verification_coverage(
    deliveries: pd.DataFrame, *, start: pd.Timestamp, end: pd.Timestamp
) -> list[dict[str, Any]]:
    """Per subscription (sorted by id), how its requests received in ``[start, end)``
    verified: ``subscription_id``, ``readable`` (verdict not ``unreadable``), ``valid``, the
    count of each of :data:`FAILED_VERIFICATION`, the ``dominant`` one of them (the larger;
    None when both are 0), its ``share`` of the readable requests, and ``suspect``: at least
    :data:`SUSPECT_SHARE` of the readable requests and at least :data:`SUSPECT_MIN` requests
    failed with that one reason.

    Requests without a subscription id (a receiver that does not log it, and a request that
    matched no secret, so none was inferred) come last, as one entry whose ``subscription_id``
    is None; their verdict is never ``valid``, so they are a suspect only when the period's
    readable requests as a whole are (at least half of all of them, and at least
    :data:`SUSPECT_MIN`, failed with their dominant reason).

    ``deliveries``: the deliveries table (``received_at``, ``subscription_id``, ``verdict``).

    >>> d = pd.DataFrame({"received_at": pd.to_datetime(["2026-10-02T00:00Z"] * 30),
    ...                   "subscription_id": ["wh_a"] * 30,
    ...                   "verdict": ["signature_mismatch"] * 25 + ["valid"] * 5})
    >>> v = verification_coverage(d, start=pd.Timestamp("2026-10-01", tz="UTC"),
    ...                           end=pd.Timestamp("2026-11-01", tz="UTC"))
    >>> v[0]["dominant"], v[0]["share"], v[0]["suspect"]
    ('signature_mismatch', 0.8333, True)
    """
    t = deliveries["received_at"]
    inside = ((t >= start) & (t < end)).fillna(False).astype(bool)
    cols = ["subscription_id", "verdict", "received_at", "event_id"]
    d = deliveries.loc[inside, [c for c in cols if c in deliveries.columns]]
    d = d[(d["verdict"] != "unreadable").fillna(False).astype(bool)]
    if d.empty:
        return []
    # Counted on the columns as they are (no Python object per row: 1M rows), then labelled
    sizes = d.groupby(["subscription_id", "verdict"], dropna=False, observed=True).size()
    table = sizes.unstack("verdict", fill_value=0)
    table.index = [_UNKNOWN if pd.isna(k) else str(k) for k in table.index]
    table.columns = [str(c) for c in table.columns]
    everything = table.sum()
    out: list[dict[str, Any]] = []
    failing = [v for v in FAILED_VERIFICATION if v in table.columns]
    many = table[failing].max(axis=1) >= SUSPECT_MIN if failing else table.index != table.index
    spans = _outside_valid(d, [str(k) for k in table.index[many] if k != _UNKNOWN])
    for sub, row in table.sort_index().iterrows():
        if sub != _UNKNOWN:
            out.append(_with_span(_entry(str(sub), row, row), spans.get(str(sub), [])))
    if _UNKNOWN in table.index:
        unknown = table.T[_UNKNOWN]  # a column: one Series (``.loc`` may give a frame)
        out.append(_delivered(_entry(None, unknown, everything), d))
    return out


def _delivered(entry: dict[str, Any], d: pd.DataFrame) -> dict[str, Any]:
    """The entry of the requests without a subscription id with ``delivered_events``: how
    many failed with its dominant reason while carrying an event that a valid request of the
    period carried (the service sends each event to every subscription: genuine deliveries,
    signed with a secret the file lacks, not forgeries of new events). At least
    :data:`SUSPECT_SHARE` of its readable requests and :data:`SUSPECT_MIN` so make it a
    suspect, whatever the period's share."""
    dominant = max(FAILED_VERIFICATION, key=lambda v: int(entry[v]))
    n_failed = int(entry[dominant])
    if "event_id" not in d.columns or entry["suspect"] or n_failed < SUSPECT_MIN:
        return entry
    if n_failed < SUSPECT_SHARE * entry["readable"]:
        return entry
    valid = (d["verdict"] == "valid").fillna(False).astype(bool)
    events = d.loc[valid, "event_id"].dropna().unique()
    failed = d["subscription_id"].isna() & (d["verdict"] == dominant).fillna(False).astype(bool)
    n = int(d.loc[failed, "event_id"].isin(events).sum())
    out = entry | {"delivered_events": n}
    if not entry["suspect"] and n >= SUSPECT_MIN and n >= SUSPECT_SHARE * entry["readable"]:
        out |= {"dominant": dominant, "suspect": True}
    return out


#: The crosstab's key of the requests without a subscription id (not an id: it has a space).
_UNKNOWN = "(no subscription id)"


def _entry(sub: str | None, row: pd.Series, judged: pd.Series) -> dict[str, Any]:
    """One subscription's entry; ``judged``: the counts its suspicion is decided on."""
    failed = {v: int(row.get(v, 0)) for v in FAILED_VERIFICATION}
    readable = int(row.sum())
    dominant = max(FAILED_VERIFICATION, key=lambda v: failed[v])  # ties: the first
    n = failed[dominant]
    total, among = int(judged.sum()), int(judged.get(dominant, 0))
    share = among / total if total else 0.0
    return {
        "subscription_id": sub,
        "readable": readable,
        "valid": int(row.get("valid", 0)),
        **failed,
        "dominant": dominant if n else None,
        "share": round(share, 4),
        "suspect": bool(n and among >= SUSPECT_MIN and share >= SUSPECT_SHARE),
    }


def _outside_valid(
    d: pd.DataFrame, candidates: list[str]
) -> dict[str, list[tuple[str, str, pd.Series]]]:
    """Per subscription id of ``candidates`` (those with :data:`SUSPECT_MIN` failures of one
    reason: no other can be a suspect), its readable requests after its last ``valid`` one
    and before its first: (``"after"`` or ``"before"``, that valid request's receipt time,
    the counts by verdict of the requests beyond it)."""
    if not candidates:
        return {}
    known = d[d["subscription_id"].isin(candidates).fillna(False).astype(bool)]
    sub, t = known["subscription_id"], known["received_at"]
    valid_t = t.where((known["verdict"] == "valid").fillna(False).astype(bool))
    out: dict[str, list[tuple[str, str, pd.Series]]] = {}
    grouped = valid_t.groupby(sub, observed=True)
    for side in ("after", "before"):
        late = side == "after"
        edge = grouped.transform("max") if late else grouped.transform("min")
        beyond = ((t > edge) if side == "after" else (t < edge)).fillna(False).astype(bool)
        if not beyond.any():
            continue
        rows = known[beyond]
        bounds = grouped.max() if late else grouped.min()
        sizes = rows.groupby(["subscription_id", "verdict"], observed=True).size()
        edges = {str(k): pd.Timestamp(v) for k, v in bounds.items()}
        for s, row in sizes.unstack(fill_value=0).iterrows():
            out.setdefault(str(s), []).append((side, _iso(edges[str(s)]), row))
    return out


def _with_span(entry: dict[str, Any], spans: list[tuple[str, str, pd.Series]]) -> dict[str, Any]:
    """``entry`` narrowed to a ``span`` when its requests after its last valid one (a rotation
    missing from the secrets file) or before its first (an old secret missing) are a suspect
    on their own, whether or not its whole period is: the requests inside stay judged.
    ``span`` says which side and counts the requests beyond it. Both sides suspect: the
    whole subscription is."""
    beyond = []
    for side, bound, row in spans:
        e = _entry(entry["subscription_id"], row, row)
        if e["suspect"]:
            dominant = str(e["dominant"])
            span = {side: bound, "readable": e["readable"], dominant: e[dominant]}
            beyond.append(entry | {"dominant": dominant, "share": e["share"], "span": span})
    if len(beyond) == 1:
        return beyond[0] | {"suspect": True}
    return entry | {"suspect": True} if beyond else entry


def suspect_subscriptions(verification: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The suspects of :func:`verification_coverage` (subscriptions whose requests mostly
    failed verification with one reason).

    >>> suspect_subscriptions([{"subscription_id": "a", "suspect": False},
    ...                        {"subscription_id": "b", "suspect": True}])
    [{'subscription_id': 'b', 'suspect': True}]
    """
    return [v for v in verification if v.get("suspect")]


#: How a failed verification's verdict reads in a sentence.
_WORDS = {
    "rotated_secret": "matched only a replaced secret",
    "signature_mismatch": "signature mismatch",
}
#: Suspects named in a sentence (the rest counted).
_NAMED = 5


def _named(sub: object) -> str:
    return "the requests without a subscription id" if sub is None else str(sub)[:60]


def _counted(v: dict[str, Any]) -> str:
    """A suspect named with its failed requests: over the period, or beyond its ``span``."""
    n = v.get("span") or v
    where = ""
    for side, words in (("after", "after its last"), ("before", "before its first")):
        if side in n:
            at = pd.Timestamp(n[side]).tz_convert("UTC")
            where = f" {words} valid request, {at:%Y-%m-%d %H:%M} UTC"
    dominant = str(v["dominant"])
    if v["subscription_id"] is None and v.get("delivered_events"):
        n_events = int(v["delivered_events"])
        where = f", {n_events:,} of them with events validly delivered to another subscription"
    return (
        f"{_named(v['subscription_id'])} ({int(n[dominant]):,} of {int(n['readable']):,} "
        f"readable{where}: {_WORDS.get(dominant, dominant)})"
    )


def secrets_sentence(verification: list[dict[str, Any]], secrets_file: str | None) -> str:
    """One sentence naming the suspects of ``verification`` and the secrets file (by the name
    given, never its contents) as the likely cause; "" without a suspect.

    >>> v = [{"subscription_id": "wh_main", "readable": 40, "signature_mismatch": 38,
    ...       "dominant": "signature_mismatch", "suspect": True}]
    >>> secrets_sentence(v, "wrong.json")  # doctest: +NORMALIZE_WHITESPACE
    'Most requests of wh_main (38 of 40 readable: signature mismatch) failed verification
    with one reason: the secrets file wrong.json likely holds wrong or outdated secrets for
    it, rather than the receiver being at fault.'
    """
    suspects = suspect_subscriptions(verification)
    if not suspects:
        return ""
    parts = [_counted(v) for v in suspects[:_NAMED]]
    if len(suspects) > _NAMED:
        parts.append(f"{len(suspects) - _NAMED:,} more subscriptions")
    named = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    file = f"the secrets file {secrets_file}" if secrets_file else "the secrets file"
    them = "it" if len(suspects) == 1 else "them"
    return (
        f"Most requests of {named} failed verification with one reason: {file} likely holds "
        f"wrong or outdated secrets for {them}, rather than the receiver being at fault."
    )


def coverage_alerts(capture: dict[str, Any] | None, sentence: str = "") -> list[str]:
    """One line each for what makes the evidence itself doubtful: ``sentence``
    (:func:`secrets_sentence`), then each gap of ``capture`` (:func:`capture_coverage`).

    >>> coverage_alerts({"gaps": [{"start": "2026-10-09T23:50:00+00:00",
    ...     "end": "2026-10-17T00:10:00+00:00", "hours": 168.33}]})
    ['No capture from 2026-10-09 23:50 to 2026-10-17 00:10 UTC (7.0 days): a capture outage?']
    """
    out = [sentence] if sentence else []
    for g in (capture or {}).get("gaps") or []:
        a, b = (pd.Timestamp(g[k]).tz_convert("UTC") for k in ("start", "end"))
        out.append(
            f"No capture from {a:%Y-%m-%d %H:%M} to {b:%Y-%m-%d %H:%M} UTC "
            f"({float(g['hours']) / 24:.1f} days): a capture outage?"
        )
    return out
