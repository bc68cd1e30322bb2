"""Questions answered straight from the evidence store: DuckDB reads only the columns and the
``month=`` partitions a question needs and hands back a small table.

- :func:`counts_by_period`: deliveries received, valid, not valid, attempts and their failure
  rate per day, week or month, per subscription (or overall);
- :func:`latency_by_period`: percentiles of the receiver's answer time (``response_ms``) of the
  valid deliveries, the same way;
- :func:`takedown_times`: each incident's time to takedown, right-censored (the rows of
  :func:`audit.analysis.takedown.takedown_durations`), and :func:`takedown_by_class`, its
  summary per incident class (:func:`audit.analysis.takedown.takedown_summary`).

The parts come from the store's manifest (:meth:`audit.ingest.store.Store.parts`), each checked
against its sha256 first: a damaged part is refused, never read. The rules are those of the
in-memory analyses (``tests/test_questions.py`` holds them equal): an attempt is a valid
delivery with an event id (:func:`audit.analysis.deliveries.infer_attempts`), it failed when
it was answered other than 2xx within 5 s (:func:`audit.analysis.metrics.daily_failure_rate`);
the incident fold is the in-memory fold's rule itself (:func:`audit.analysis.incidents.fold_rule`,
over the first valid receipt of each event id), run by the engine over the parts; the stored
time texts are parsed once each by the in-memory fold's parser, and the durations computed
in pandas by the same functions as the in-memory analyses.

Periods are UTC: a day from midnight, an ISO week from Monday, a calendar month.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import pyarrow as pa

from audit.analysis.deliveries import count_where, is_attempt, succeeded
from audit.analysis.deliveries import quantiles as quantile_values
from audit.analysis.engine import Parquet, Rule, frame_of, run
from audit.analysis.event_fields import PLAIN_TIME, parse_plain_time, parse_times
from audit.analysis.incident_events import copy_number, left_out
from audit.analysis.incidents import fold_rule
from audit.analysis.metrics import failure_counts, failure_rate, period_start
from audit.analysis.survival import MISSING_GROUP
from audit.analysis.takedown import (
    DURATION_COLUMNS,
    INCIDENT_COLUMNS,
    check_clock_start,
    takedown_durations,
    takedown_summary,
)
from audit.errors import ParameterError
from audit.ingest.query import DEFAULT_LOOKBACK
from audit.ingest.scan import arrow_of, open_store, parts_read, sql_list
from audit.ingest.store import Store
from audit.tables import INCIDENTS
from audit.timeutil import as_utc

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "COUNT_COLUMNS",
    "PERIODS",
    "counts_by_period",
    "latency_by_period",
    "takedown_by_class",
    "takedown_times",
]

#: The periods a question may group by (``period=``).
PERIODS: tuple[str, ...] = ("day", "week", "month")
#: The columns of :func:`counts_by_period`, in order.
COUNT_COLUMNS: tuple[str, ...] = (
    "period",
    "subscription_id",
    "received",
    "valid",
    "not_valid",
    "attempts",
    "answered",
    "failed",
    "failure_rate",
)
_UTC: Final = "datetime64[ns, UTC]"
StoreLike = Store | str | os.PathLike[str]


def _period(period: object) -> str:
    if period not in PERIODS:
        raise ParameterError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")
    return str(period)


def _by(by: object) -> bool:
    """Whether ``by`` asks for a row per subscription (``"subscription"``) or none (None)."""
    if by is None:
        return False
    if by in ("subscription", "subscription_id"):
        return True
    raise ParameterError(f"by must be 'subscription' or None, got {by!r}")


def _bounds(start: object, end: object) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    lo = None if start is None else as_utc(start, name="start")
    hi = None if end is None else as_utc(end, name="end")
    if lo is not None and hi is not None and hi < lo:
        raise ParameterError(f"end {hi.isoformat()} is before start {lo.isoformat()}")
    return lo, hi


def _month_parts(
    s: Store, lo: pd.Timestamp | None, hi: pd.Timestamp | None, *, untimed: bool
) -> list[Path]:
    """The store's parts of the months that ``[lo, hi]`` touches (and of ``month=none``, the
    records without a receipt time, when ``untimed``), each checked against its sha256."""
    months = set()
    for entry in s.manifest()["files"]:
        for part in entry["parts"]:
            months.add(part["name"].split("/")[0].removeprefix("month="))
    first = "" if lo is None else f"{lo:%Y-%m}"
    last = "9999-99" if hi is None else f"{hi:%Y-%m}"
    wanted = [m for m in months if m != "none" and first <= m <= last]
    if untimed and "none" in months:
        wanted.append("none")
    return list(s.parts(sorted(wanted))) if wanted else []


def _received_in(lo: pd.Timestamp | None, hi: pd.Timestamp | None) -> pa.Table:
    """The window ``[lo, hi]`` (either end open when None) as a rule's ``settings`` (data: one
    compiled rule serves every window)."""
    utc = pa.timestamp("ns", "UTC")
    return pa.table({"lo": pa.array([lo], utc), "hi": pa.array([hi], utc)})


def _in_window(deliveries: ir.Table, settings: ir.Table) -> ir.Table:
    """The deliveries received in the window of ``settings`` (:func:`_received_in`)."""
    d = deliveries.cross_join(settings)
    t = d.received_at
    kept = d.filter(t.notnull(), d.lo.isnull() | (t >= d.lo), d.hi.isnull() | (t <= d.hi))
    return kept.drop("lo", "hi")


def _grouped(d: ir.Table, period: str, per_sub: bool) -> ir.GroupedTable:
    """``d`` by ``period`` (its first instant, UTC) and subscription (``"(missing)"`` when
    unknown; ``"all"`` for a question asked over every subscription)."""
    import ibis  # start-up: only an analysis needs it

    sub = d.subscription_id.fill_null(MISSING_GROUP) if per_sub else ibis.literal("all")
    return d.group_by(period=period_start(d.received_at, period), subscription_id=sub)


def _counts_rule(
    deliveries: ir.Table, settings: ir.Table, *, period: str, per_sub: bool
) -> ir.Table:
    """The rows of :func:`counts_by_period`, by the rules of the in-memory tables: an attempt
    (:func:`audit.analysis.deliveries.is_attempt`), its success
    (:func:`audit.analysis.deliveries.succeeded`) and the failure counts
    (:func:`audit.analysis.metrics.failure_counts`)."""
    d = _in_window(deliveries, settings)
    g = _grouped(d, period, per_sub).aggregate(
        received=d.count(),
        valid=count_where(d.verdict == "valid"),
        not_valid=count_where(d.verdict != "valid"),
        **failure_counts(
            is_attempt(d.verdict, d.event_id), succeeded(d.response_status, d.response_ms)
        ),
    )
    out = g.mutate(failure_rate=failure_rate(g.failed, g.answered))
    return out.select(*COUNT_COLUMNS).order_by(["period", "subscription_id"])


def _latency_rule(
    deliveries: ir.Table,
    settings: ir.Table,
    *,
    period: str,
    per_sub: bool,
    names: tuple[tuple[str, float], ...],
) -> ir.Table:
    """The rows of :func:`latency_by_period`: the quantiles ``names`` (name, q) of the valid
    deliveries' answer times, as :func:`audit.analysis.deliveries.latency_summary` takes them
    (:func:`audit.analysis.deliveries.quantiles`)."""
    d = _in_window(deliveries, settings)
    d = d.filter(d.verdict == "valid", d.response_ms.notnull())
    ms = d.response_ms.cast("float64")
    g = _grouped(d, period, per_sub).aggregate(
        n=d.count(), **quantile_values(ms, dict(names)), max_ms=ms.max()
    )
    return g.order_by(["period", "subscription_id"])


def _asked(
    rule: Rule,
    parts: list[Path],
    lo: pd.Timestamp | None,
    hi: pd.Timestamp | None,
    **constants: Any,
) -> pd.DataFrame:
    """``rule`` run by the engine on the ``parts`` (read where they lie) in ``[lo, hi]``."""
    with parts_read(parts):  # a part replaced or damaged meanwhile: one line
        got = run(
            rule,
            {"deliveries": Parquet(tuple(parts)), "settings": _received_in(lo, hi)},
            **constants,
        )
    out: pd.DataFrame = got.to_pandas()
    return out


def _run(parts: list[Path], sql: str, params: list[object]) -> pd.DataFrame:
    """``sql`` with ``{src}`` the parts (read as they are, no Hive columns) as a DataFrame."""
    src = f"read_parquet({sql_list(parts)}, hive_partitioning = false)"
    with parts_read(parts) as con:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_progress_bar = false")
        table: pa.Table = arrow_of(con.sql(sql.format(src=src), params=params))
    out: pd.DataFrame = table.to_pandas()
    return out


def _labels(df: pd.DataFrame) -> pd.DataFrame:
    """``period`` as UTC timestamps (ns), ``subscription_id`` as text."""
    return df.astype({"period": _UTC, "subscription_id": "str"})


def counts_by_period(
    store: StoreLike,
    *,
    period: str = "day",
    by: str | None = "subscription",
    start: pd.Timestamp | str | None = None,
    end: pd.Timestamp | str | None = None,
) -> pd.DataFrame:
    """Deliveries and failed attempts per ``period`` (``"day"``, ``"week"``, ``"month"``) and
    subscription (``by=None``: over every subscription, labelled ``"all"``), received in
    ``[start, end]`` (either end open when None).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COUNT_COLUMNS`: ``period`` (its first instant, UTC), ``subscription_id``
        (``"(missing)"`` when unknown), ``received`` (every record with a receipt time),
        ``valid``, ``not_valid``, ``attempts`` (valid with an event id: what
        :func:`audit.analysis.deliveries.infer_attempts` numbers), ``answered`` (an answer
        captured), ``failed`` (answered other than 2xx within 5 s) and ``failure_rate``
        (``failed / answered``, NaN when nothing was answered), as
        :func:`audit.analysis.metrics.daily_failure_rate` counts them. Only periods with a
        record have a row.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from audit.demo.simulate import simulate
    >>> from audit.ingest.store import ingest
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> demo = simulate(tmp / "demo", days=7, incidents=20)
    >>> _ = ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    >>> weeks = counts_by_period(tmp / "store", period="week", by=None)
    >>> weeks["period"].dt.day_name().unique().tolist(), weeks["subscription_id"].unique().tolist()
    (['Monday'], ['all'])
    >>> days = counts_by_period(tmp / "store", period="day")  # per subscription
    >>> int(days["received"].sum()) == int(weeks["received"].sum())
    True
    """
    unit, per_sub = _period(period), _by(by)
    lo, hi = _bounds(start, end)
    s = open_store(store)
    parts = _month_parts(s, lo, hi, untimed=False)
    if not parts:
        return _empty_counts()
    out = _asked(_counts_rule, parts, lo, hi, period=unit, per_sub=per_sub)
    counts = dict.fromkeys(COUNT_COLUMNS[2:-1], "int64")
    return _labels(out.astype({**counts, "failure_rate": "float64"}))


def _empty_counts() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "period": pd.Series([], dtype=_UTC),
            "subscription_id": pd.Series([], dtype="str"),
            **{c: pd.Series([], dtype="int64") for c in COUNT_COLUMNS[2:-1]},
            "failure_rate": pd.Series([], dtype="float64"),
        }
    )


def _quantile_names(quantiles: Sequence[object]) -> list[str]:
    names = []
    for q in quantiles:
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
            raise ParameterError(f"quantiles must be numbers from 0 to 1, got {q!r}")
        names.append(f"p{q * 100:g}_ms")
    if not names or len(set(names)) != len(names):
        raise ParameterError(f"quantiles must be distinct and at least one, got {quantiles!r}")
    return names


def latency_by_period(
    store: StoreLike,
    *,
    period: str = "day",
    by: str | None = "subscription",
    start: pd.Timestamp | str | None = None,
    end: pd.Timestamp | str | None = None,
    quantiles: Sequence[float] = (0.5, 0.95, 0.99),
) -> pd.DataFrame:
    """Percentiles of the receiver's answer time (``response_ms``) of the valid deliveries per
    ``period`` and subscription (as :func:`counts_by_period`), received in ``[start, end]``.

    Returns
    -------
    pandas.DataFrame
        Columns ``period, subscription_id, n`` (valid deliveries with an answer time), one
        column per quantile (``p50_ms, p95_ms, p99_ms`` by default: linear interpolation, as
        :meth:`pandas.Series.quantile` and :func:`audit.analysis.deliveries.latency_summary`)
        and ``max_ms``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from audit.demo.simulate import simulate
    >>> from audit.ingest.store import ingest
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> demo = simulate(tmp / "demo", days=7, incidents=20)
    >>> _ = ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    >>> got = latency_by_period(tmp / "store", period="month", quantiles=(0.5,))
    >>> list(got.columns), sorted(got["subscription_id"])
    (['period', 'subscription_id', 'n', 'p50_ms', 'max_ms'], ['wh_main', 'wh_siem'])
    """
    unit, per_sub = _period(period), _by(by)
    names = _quantile_names(quantiles)
    lo, hi = _bounds(start, end)
    s = open_store(store)
    parts = _month_parts(s, lo, hi, untimed=False)
    columns = ["period", "subscription_id", "n", *names, "max_ms"]
    if not parts:
        empty = pd.DataFrame({c: pd.Series([], dtype="float64") for c in columns[2:]})
        empty.insert(0, "period", pd.Series([], dtype=_UTC))
        empty.insert(1, "subscription_id", pd.Series([], dtype="str"))
        return empty.astype({"n": "int64"})
    asked = tuple((n, float(q)) for n, q in zip(names, quantiles, strict=True))
    out = _asked(_latency_rule, parts, lo, hi, period=unit, per_sub=per_sub, names=asked)
    out = out.astype({"n": "int64", **dict.fromkeys([*names, "max_ms"], "float64")})
    return _labels(out)[columns]


#: Stored incident fields -> the fold's field columns (:data:`audit.tables.DATA_FIELDS`): the
#: texts the takedown question reads, and its times (stored as sent: parsed here).
_TEXTS = {"data_incident_class": "incident_class", "data_source": "source", "data_status": "status"}
_TIMES = {
    "data_timestamp": "data_timestamp",
    "data_burn_started": "burn_started_at",
    "data_takedown_timestamp": "takedown_timestamp",
}


def _time_texts_rule(deliveries: ir.Table) -> ir.Table:
    """The distinct texts of the stored incident times of the valid receipts with an event id
    that are not :data:`~audit.analysis.event_fields.PLAIN_TIME` (``text``): :func:`_time_table`
    parses each once."""
    import ibis  # start-up: only an analysis needs it

    d = deliveries.filter((deliveries.verdict == "valid") & deliveries.event_id.notnull())
    texts = [d.select(text=d[c]) for c in _TIMES]
    texts = [t.filter(t.text.notnull() & ~t.text.re_search(PLAIN_TIME)) for t in texts]
    return ibis.union(*texts, distinct=True)


def _time_table(texts: pa.Table) -> pa.Table:
    """``texts`` (:func:`_time_texts_rule`) with ``at``, each parsed by the in-memory fold's
    rule (:func:`audit.analysis.event_fields.parse_times`: ISO 8601, in pandas' range; else
    missing), for :func:`_takedown_rule` to look up."""
    parsed = parse_times(texts.column("text").to_pandas().astype("str"))[0]
    ns = pa.array(parsed.array.asi8, pa.int64(), mask=parsed.isna().to_numpy())
    return pa.table({"text": texts.column("text"), "at": ns.cast(pa.timestamp("ns", "UTC"))})


def _takedown_rule(
    deliveries: ir.Table, times: ir.Table, settings: ir.Table, *, lookup: bool = True
) -> ir.Table:
    """The columns of the incidents that :func:`takedown_durations` reads (``INCIDENT_COLUMNS``),
    folded from the stored ``deliveries`` received in ``[since, as_of]`` (or without a
    receipt time; ``settings``: one row, ``since`` (missing: from the first) and ``as_of``) by
    the in-memory fold's rules: the first valid receipt of each event id
    (:func:`audit.analysis.incident_events.copy_number`; ties: the record's source and line),
    the events kept (:func:`audit.analysis.incident_events.left_out`) and folded
    (:func:`audit.analysis.incidents.fold_rule`). A stored time is parsed in the rule when it
    is :data:`~audit.analysis.event_fields.PLAIN_TIME` (as the service sends them), else looked
    up in ``times`` (:func:`_time_table`; ``lookup=False``: there is none)."""
    d = deliveries
    since, as_of = settings.since.max().as_scalar(), settings.as_of.max().as_scalar()
    received = (since.isnull() | (d.received_at >= since)) & (d.received_at <= as_of)
    d = d.filter(
        (d.verdict == "valid") & d.event_id.notnull() & (d.received_at.isnull() | received)
    )
    d = d.mutate(_copy=copy_number(d, ties=("source", "line")))
    d = d.filter(d._copy == 0)
    d = d.filter(left_out(d, as_of) == "events")
    keys = ["incident_id", "event_id", "event", "event_timestamp", "received_at"]
    texts = {f"_{field}_text": d[c] for c, field in _TIMES.items()}
    plain = {field: parse_plain_time(d[c]) for c, field in _TIMES.items()}
    events = d.select(*keys, **texts, **plain, **{field: d[c] for c, field in _TEXTS.items()})
    for field in _TIMES.values() if lookup else ():
        text = f"_{field}_text"
        parsed = times.select(**{text: times.text, "_at": times.at})
        events = events.left_join(parsed, text)
        events = events.mutate(**{field: events[field].fill_null(events._at)}).drop("_at")
    events = events.drop(*texts)
    return fold_rule(events, settings).select(*INCIDENT_COLUMNS)


def takedown_times(
    store: StoreLike,
    *,
    start: pd.Timestamp | str | None = None,
    end: pd.Timestamp | str | None = None,
    as_of: pd.Timestamp | str | None = None,
    clock_start: str = "created",
    lookback: pd.Timedelta | None = DEFAULT_LOOKBACK,
) -> pd.DataFrame:
    """Each incident's time to takedown, right-censored, as a report of ``[start, end]`` counts
    it: the incidents folded from the events received from ``start - lookback`` (the first,
    when ``start`` or ``lookback`` is None) up to ``as_of`` (default ``end``; the store's
    latest receipt when both are None), their state as of ``as_of``.

    Returns
    -------
    pandas.DataFrame
        The durations of :func:`audit.analysis.takedown.takedown_durations` (columns
        :data:`audit.analysis.takedown.DURATION_COLUMNS`: ``incident_id, incident_class,
        source, start_at, end_at, duration_s, observed``), sorted by ``incident_id``; the
        incidents it excludes (no start, a start after ``as_of``, a negative duration) are
        left out, counted in ``attrs["exclusions"]``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from audit.demo.simulate import simulate
    >>> from audit.ingest.store import ingest
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> demo = simulate(tmp / "demo", days=7, incidents=20)
    >>> _ = ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    >>> d = takedown_times(tmp / "store", as_of="2026-10-08T00:00:00Z")
    >>> len(d) <= demo.incidents, list(d.columns) == list(DURATION_COLUMNS)
    (True, True)
    """
    clock = check_clock_start(clock_start)
    lo, hi = _bounds(start, end)
    s = open_store(store)
    when = _as_of(s, as_of, hi)
    since = None if lo is None or lookback is None else lo - lookback
    parts = tuple(_month_parts(s, since, when, untimed=True))
    if not parts:
        incidents = INCIDENTS.empty()[list(INCIDENT_COLUMNS)]
    else:
        stored = Parquet(parts)
        texts = run(_time_texts_rule, {"deliveries": stored})
        times, at = _time_table(texts), _window(since, when)
        inputs = {"deliveries": stored, "times": times, "settings": at}
        got = run(_takedown_rule, inputs, lookup=len(times) > 0)
        incidents = frame_of(got, INCIDENTS)
    got = takedown_durations(incidents, as_of=when, start=clock)
    out = got.durations.sort_values("incident_id", ignore_index=True)[list(DURATION_COLUMNS)]
    out.attrs["exclusions"] = got.exclusions
    return out


def _window(since: pd.Timestamp | None, as_of: pd.Timestamp) -> pa.Table:
    """The settings of :func:`_takedown_rule`: ``since`` (missing: from the first), ``as_of``."""
    ns = pa.timestamp("ns", "UTC")
    values = {"since": None if since is None else since.value, "as_of": as_of.value}
    return pa.table({n: pa.array([v], pa.int64()).cast(ns) for n, v in values.items()})


def _as_of(s: Store, as_of: object, end: pd.Timestamp | None) -> pd.Timestamp:
    if as_of is not None:
        return as_utc(as_of)
    if end is not None:
        return end
    parts = _month_parts(s, None, None, untimed=False)
    if parts:
        got = _run(parts, "SELECT max(received_at) AS t FROM {src}", [])["t"].iloc[0]
        if not pd.isna(got):
            return as_utc(pd.Timestamp(got))
    raise ParameterError(f"{s.root}: no receipt time in the store: give as_of")


def takedown_by_class(
    store: StoreLike,
    *,
    start: pd.Timestamp | str | None = None,
    end: pd.Timestamp | str | None = None,
    as_of: pd.Timestamp | str | None = None,
    clock_start: str = "created",
    lookback: pd.Timedelta | None = DEFAULT_LOOKBACK,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Time to takedown per incident class: n, takedowns, censored, median and p90 in hours
    with their ``1 - alpha`` confidence limits
    (:func:`audit.analysis.takedown.takedown_summary` of :func:`takedown_times`, whose
    parameters it takes), one row per class (``group``).

    Examples
    --------
    >>> import tempfile, pathlib, warnings
    >>> from audit.demo.simulate import simulate
    >>> from audit.ingest.store import ingest
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> demo = simulate(tmp / "demo", days=7, incidents=20)
    >>> _ = ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups
    ...     got = takedown_by_class(tmp / "store")
    >>> list(got.columns[:4]), int(got["n"].sum()) <= demo.incidents
    (['group', 'n', 'events', 'censored'], True)
    """
    durations = takedown_times(
        store, start=start, end=end, as_of=as_of, clock_start=clock_start, lookback=lookback
    )
    return takedown_summary(durations, "incident_class", alpha=alpha)
