"""The report's figures, each with alt text that says what it shows (numbers included).

Drawing is done by :mod:`audit.plotting` and :mod:`audit.report.plotting`; the data comes from
the run folder, cut to the period where the tables say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from audit.report.drawing import styled
from audit.report.format import HTML
from audit.report.params import Period
from audit.report.rundir import RunData
from audit.report.tables import deliveries_in_period, in_period
from audit.spec import schedule_text
from audit.words import words

if TYPE_CHECKING:  # annotations only
    from matplotlib.figure import Figure

__all__ = [
    "FIGURES",
    "clock_skew",
    "daily_failures",
    "latency",
    "retry_delays",
    "takedown",
    "verdicts",
]

#: The figures, in the order the packaged report shows them.
FIGURES = ("verdicts", "clock_skew", "daily_failures", "latency", "retry_delays", "takedown")


#: The deliveries columns the figures draw or cut by (a run folder's table has twenty-odd; at
#: a million rows, reading and cutting all of them took longer than the drawing).
_DRAWN = (
    "source",
    "received_at",
    "verdict",
    "skew_s",
    "response_ms",
    "subscription_id",
    "event_id",
    "attempt_no",
    "delay_s",
    "expected_delay_s",
    "on_schedule",
    "missing_before",
    "success",
)


#: The events columns the figures draw or cut by.
_EVENTS_DRAWN = ("is_test", "emission_latency_s", "first_received_at")


def _period(run: RunData) -> Period | None:
    """The run's period (:class:`~audit.report.params.Period`), or None when its manifest
    gives none (a run folder put together by hand)."""
    p = run.manifest.get("period", {})
    if not p.get("start"):
        return None
    return Period(str(p.get("label")), pd.Timestamp(p["start"]), pd.Timestamp(p["end"]))


def _period_deliveries(run: RunData) -> pd.DataFrame:
    """The drawn columns of the run's deliveries received in its period, cut once per
    deliveries table (each figure asks twice)."""
    d = run.table("deliveries", _DRAWN)
    period = _period(run)
    if d.empty or period is None:
        return d
    cached = run.derived.get("period_deliveries")
    if isinstance(cached, tuple) and cached[0] is d:  # the same table, not a replaced one
        cut: pd.DataFrame = cached[1]
        return cut
    cut = deliveries_in_period(d, period, run.table("inputs"))
    run.derived["period_deliveries"] = (d, cut)
    return cut


def _period_events(run: RunData) -> pd.DataFrame:
    """The drawn columns of the run's events first received in its period, as the report's
    tables count them (``audit.report.tables.report_tables``: an events table from a store
    also holds the events of the day before, read for retry inference)."""
    e = run.table("events", _EVENTS_DRAWN)
    period = _period(run)
    if e.empty or period is None or "first_received_at" not in e:
        return e
    return e[in_period(e["first_received_at"], period)]


def _embed(fig: Figure, alt: str, caption: str | None = None) -> HTML:
    """The figure as HTML (:func:`audit.report.plotting.embed`). matplotlib is imported when a
    figure is drawn (0.3 s), not when this module is."""
    from audit.report.plotting import embed  # start-up: matplotlib only where a figure is drawn

    return embed(fig, alt, caption)


def _nothing(run: RunData, what: str) -> HTML | None:
    """A one-line note instead of an empty plot when the period has no valid delivery."""
    d = _period_deliveries(run)
    if d.empty or not (d["verdict"] == "valid").any():
        return HTML(
            f"<p class='note'>{what}: no valid delivery in the period, nothing to draw.</p>"
        )
    return None


@styled
def verdicts(run: RunData) -> HTML:
    """Bars of requests per signature verdict."""
    from audit.plotting import plot_verdict_counts  # start-up: matplotlib, as in _embed

    counts = run.table("verdict_counts")
    listed = ", ".join(f"{words(r.verdict)} {r.count:,}" for r in counts.itertuples()) or "none"
    return _embed(
        plot_verdict_counts(_period_deliveries(run)),
        f"Bar chart of every request read in the period by signature verdict: {listed}.",
    )


@styled
def clock_skew(run: RunData) -> HTML:
    """Scatter over the period of receipt time minus signed timestamp, by verdict."""
    if (note := _nothing(run, "Clock skew")) is not None:
        return note
    from audit.plotting import plot_clock_skew  # start-up: matplotlib, as in _embed

    return _embed(
        plot_clock_skew(_period_deliveries(run)),
        "Scatter of clock skew (receipt time minus signed timestamp, seconds, symlog scale) "
        "of every request over the period, by verdict; the dashed lines mark the 5-minute "
        "tolerance.",
    )


@styled
def daily_failures(run: RunData) -> HTML:
    """Daily share of failed delivery attempts."""
    if (note := _nothing(run, "Daily failure rate")) is not None:
        return note
    from audit.plotting import plot_daily_failure_rate  # start-up: matplotlib, as in _embed

    return _embed(
        plot_daily_failure_rate(_period_deliveries(run)),
        "Line chart of the share of delivery attempts that failed, per day of the period.",
    )


def _counted(lat: pd.DataFrame) -> dict[str, str]:
    """What each latency histogram counts, as the latency table does: `` (N valid
    deliveries)`` and `` (N incident events)``."""
    if lat.empty or not {"metric", "n"} <= set(lat.columns):
        return {}
    n = lat.set_index("metric")["n"]
    what = {"ack_latency_ms": "valid deliveries", "emission_latency_s": "incident events"}
    return {m: f" ({int(n[m]):,} {w})" for m, w in what.items() if m in n and n[m] == n[m]}


@styled
def latency(run: RunData) -> HTML:
    """Acknowledgement and emission latency distributions."""
    if (note := _nothing(run, "Latency")) is not None:
        return note
    from audit.plotting import plot_latency_distributions  # start-up: matplotlib, as _embed

    lat = run.table("latency")
    p95 = ""
    counted = _counted(lat)
    if not lat.empty and "ack_latency_ms" in set(lat["metric"]):
        v = float(lat.set_index("metric")["p95"].astype(float)["ack_latency_ms"])
        p95 = f" The 95th percentile of acknowledgement latency is {v:,.0f} ms." if v == v else ""
    return _embed(
        plot_latency_distributions(_period_deliveries(run), _period_events(run), summary=lat),
        "Histograms (log scale) of acknowledgement latency in milliseconds"
        f"{counted.get('ack_latency_ms', '')} and emission latency in seconds"
        f"{counted.get('emission_latency_s', '')}, with the 5-second delivery timeout marked."
        + p95,
    )


@styled
def retry_delays(run: RunData) -> HTML:
    """Observed delays between attempts against the published schedule."""
    if (note := _nothing(run, "Retry delays")) is not None:
        return note
    from audit.plotting import plot_retry_delays  # start-up: matplotlib, as in _embed

    off = len(run.table("off_schedule_attempts"))
    return _embed(
        plot_retry_delays(_period_deliveries(run)),
        "Scatter of the delay before each retry, by attempt number, against the published "
        f"schedule ({schedule_text()}); {off} attempt(s) off schedule.",
    )


@styled
def takedown(run: RunData) -> HTML:
    """Kaplan-Meier small multiples by incident class."""
    from audit.report.plotting import takedown_panels  # start-up: matplotlib, as in _embed

    fig, alt = takedown_panels(
        run.table("takedown_km"),
        run.table("takedown_durations"),
        overall=run.table("takedown_km_all"),
    )
    return _embed(
        fig,
        alt,
        "Share of the incidents created in the period not yet taken down, by class (blue, "
        "with its 95% band) against all of them (grey). The time axis stops near the 99th "
        "percentile of durations.",
    )
