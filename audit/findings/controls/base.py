"""What a control sees (:class:`Scope`) and returns (:class:`Outcome`), and shared helpers.

Capped lists in evidence
------------------------
A list in a finding's evidence holds at most :data:`MAX_EXAMPLES` items. Every list (or
mapping) that can be cut so carries its true size beside it, always, cut or not: the key
``<name>_total`` for the list ``<name>``, e.g. ``{"examples": [...20 ids],
"examples_total": 1373}``. The total counts what the list would hold uncut: distinct ids for
:func:`ids` (:func:`listed`), rows for :func:`delivery_examples` (``examples_total`` and
``example_records_total``). A reader shows "showing 20 of 1,373" when
``len(evidence[name]) < evidence[name + "_total"]``. Lists without a ``_total`` are whole.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.analysis.analyze import DELIVERY_TABLE_COLUMNS, Analysis
from audit.analysis.coverage import (
    capture_coverage,
    secrets_sentence,
    suspect_subscriptions,
    verification_coverage,
)
from audit.findings.listing import covering

__all__ = [
    "DONE_STATUSES",
    "MAX_EXAMPLES",
    "NO_SNAPSHOT",
    "Outcome",
    "Scope",
    "capped",
    "counts",
    "delivery_examples",
    "distinct",
    "evidence_json",
    "groups",
    "ids",
    "in_period",
    "iso",
    "listed",
    "member_of",
    "pct",
    "quantiles",
    "readable_by_file",
    "skip",
    "untimed_in_period",
    "verdict",
]

#: At most this many example ids in a finding's evidence.
MAX_EXAMPLES = 20
#: Incident statuses after which an incident no longer counts as open.
DONE_STATUSES = ("closed", "takedown_success")
NO_SNAPSHOT = "No subscription listing snapshot covers the period."


@dataclass(frozen=True)
class Outcome:
    """One verdict of a control: ``status`` (pass, fail, info, skip), a one-sentence ``reason``
    with the figures, the ``resource`` judged and the ``evidence`` (JSON-able)."""

    status: str
    reason: str
    resource: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


def in_period(series: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
    """``start <= value < end``; missing values are outside."""
    return ((series >= start) & (series < end)).fillna(False).astype(bool)


def readable_by_file(inputs: pd.DataFrame | None) -> dict[str, int]:
    """Readable records of each capture file, the whole file's (loaded or not): ``records``
    minus ``unreadable`` of an inputs table, by ``source``; {} without one."""
    if inputs is None or not {"source", "records", "unreadable"} <= set(inputs.columns):
        return {}
    logs = inputs[inputs["kind"] == "capture log"] if "kind" in inputs.columns else inputs
    out: dict[str, int] = {}
    for source, records, unreadable in zip(
        logs["source"], logs["records"], logs["unreadable"], strict=True
    ):
        if pd.notna(records) and pd.notna(unreadable):
            out[str(source)] = int(records) - int(unreadable)
    return out


def untimed_in_period(
    d: pd.DataFrame,
    start: pd.Timestamp,
    end: pd.Timestamp,
    held: Mapping[str, int] | None = None,
) -> pd.Series:
    """The records without a receipt time (unreadable lines) that count in ``[start, end)``:
    those whose file has readable records in it, or none at all (then nothing places them
    elsewhere). A mask over ``d`` (``received_at``, ``source``).

    ``held`` (:func:`readable_by_file`) gives each file's readable records, the whole file's:
    a file none of whose readable records were loaded (they lie after the data was cut, in a
    later period) holds its unreadable lines there, not here."""
    t = d["received_at"]
    untimed = t.isna()
    if not untimed.any():
        return untimed.astype(bool)
    source = d["source"]
    lost = source[untimed]
    # The spans of the files that hold untimed records only: two columns of their rows grouped,
    # not the whole period's (a 1M month has two unreadable lines in one file).
    timed = ~untimed & member_of(source, lost.drop_duplicates())
    spans = t[timed].groupby(source[timed]).agg(["min", "max"])
    overlaps = (spans["min"] < end) & (spans["max"] >= start)
    elsewhere = overlaps.index[~overlaps.to_numpy(dtype=bool)]  # files read in other periods
    keep = ~lost.isin(elsewhere)  # unknown files count here
    if held:
        unplaced = ~lost.isin(spans.index)  # no readable record of the file was loaded
        read_later = lost.map(lambda name: held.get(str(name), 0) > 0).astype(bool)
        keep = keep & ~(unplaced & read_later)
    return keep.reindex(d.index, fill_value=False)


def member_of(values: pd.Series, among: pd.Series) -> pd.Series:
    """``values.isin(among)``, the same answer. For two Arrow-backed string columns it is
    computed in Arrow: pandas makes one Python scalar per value of ``among`` first (about 0.15 s
    per call at 60,000 incidents, three calls in the TKD controls)."""
    dtype = values.dtype
    if not (
        isinstance(dtype, pd.StringDtype) and dtype == among.dtype and dtype.storage == "pyarrow"
    ):
        return values.isin(among)
    data = pa.chunked_array(pa.array(values.array))
    found = pc.is_in(data, value_set=pa.array(among.array).cast(data.type))
    return pd.Series(found.to_numpy(zero_copy_only=False), index=values.index, name=values.name)


@dataclass
class Scope:
    """The analysis frames cut to ``[period_start, period_end)``, each computed on first use.

    Computing lazily means a frame that cannot be cut (a missing column) fails only the controls
    that read it, as ``error`` rows, and the others still run.

    Attributes
    ----------
    deliveries
        Requests received in the period (every verdict), with the columns of the deliveries
        table as ``audit analyze`` writes it (the verdict and attempt columns).
    valid
        Those of them whose verdict is ``valid``: the service's deliveries.
    events
        Events (one per subscription and event id) first received in the period.
    incidents_created
        Incidents created in the period.
    incidents_current
        Incidents created before ``period_end`` that were created in the period or are still
        open (status not ``closed`` nor ``takedown_success``) at ``as_of``.
    snapshots
        Listing rows of the snapshots that cover the period (:mod:`audit.findings.listing`):
        fetched in the period, or the newest fetched before it when none falls in it and it is
        at most 7 days older than the period's end; none otherwise.
    capture
        Which days and hours of the period (up to ``as_of``) held captures, and the gaps
        (:func:`audit.analysis.coverage.capture_coverage`).
    verification
        How each subscription's requests verified, and whether the secrets file is the likely
        cause of their failing (:func:`audit.analysis.coverage.verification_coverage`).
    secrets_file
        The secrets file as the caller named it (its path as given, never its contents), for
        the reasons that blame it; None when unknown.
    """

    analysis: Analysis
    period_start: pd.Timestamp
    period_end: pd.Timestamp
    params: Mapping[str, float]
    secrets_age: Mapping[str, int | None] | None = None
    secrets_file: str | None = None

    @property
    def as_of(self) -> pd.Timestamp:
        """The time the analysis judges the data at."""
        return self.analysis.as_of

    @property
    def deliveries(self) -> pd.DataFrame:
        # The columns of the deliveries table as written (deliveries.parquet), not the store's
        # extracted incident fields: each row filter below copies every column it holds. Not
        # kept: one control reads it, and the copy is nearly every delivery (0.4 GB at 1M).
        d = self.analysis.deliveries
        d = d[[c for c in DELIVERY_TABLE_COLUMNS if c in d.columns]]
        return d[in_period(d["received_at"], self.period_start, self.period_end)]

    @cached_property
    def valid(self) -> pd.DataFrame:
        # The rows of :attr:`deliveries` whose verdict is valid, cut in one step.
        d = self.analysis.deliveries
        d = d[[c for c in DELIVERY_TABLE_COLUMNS if c in d.columns]]
        keep = in_period(d["received_at"], self.period_start, self.period_end)
        return d[keep & (d["verdict"] == "valid").fillna(False).astype(bool)]

    @cached_property
    def events(self) -> pd.DataFrame:
        e = self.analysis.events
        return e[in_period(e["first_received_at"], self.period_start, self.period_end)]

    @cached_property
    def incidents_created(self) -> pd.DataFrame:
        inc = self.analysis.incidents
        return inc[in_period(inc["created_at"], self.period_start, self.period_end)]

    @cached_property
    def incidents_current(self) -> pd.DataFrame:
        inc = self.analysis.incidents
        before_end = (inc["created_at"] < self.period_end).fillna(False).astype(bool)
        open_now = ~inc["status"].isin(DONE_STATUSES)
        created = in_period(inc["created_at"], self.period_start, self.period_end)
        return inc[before_end & (created | open_now)]

    @cached_property
    def snapshots(self) -> pd.DataFrame:
        # the one rule of audit.findings.listing, which the report's banner uses too
        subs = self.analysis.subscriptions
        keep = covering(subs["fetched_at"], self.period_start, self.period_end)
        judged: pd.DataFrame = subs[keep]
        return judged

    @cached_property
    def capture(self) -> dict[str, Any]:
        return capture_coverage(
            self.analysis.deliveries["received_at"],
            start=self.period_start,
            end=self.period_end,
            as_of=self.as_of,
        )

    @cached_property
    def verification(self) -> list[dict[str, Any]]:
        return verification_coverage(
            self.analysis.deliveries, start=self.period_start, end=self.period_end
        )

    def secrets_suspects(self) -> list[str | None]:
        """The subscriptions whose requests mostly failed verification with one reason
        (:func:`audit.analysis.coverage.suspect_subscriptions`; None: the requests without a
        subscription id): their verdicts blame the secrets file, not the receiver."""
        return [v["subscription_id"] for v in suspect_subscriptions(self.verification)]

    def suspected(self, rows: pd.DataFrame) -> pd.Series:
        """A mask over ``rows`` (``subscription_id``, ``verdict``): the readable requests of
        the :meth:`secrets_suspects`, of one with a ``span`` only those beyond it (an unreadable
        line was never verified, so its verdict blames nothing: it stays counted as
        unreadable)."""
        suspects = self.secrets_suspects()
        spans = {v["subscription_id"]: v["span"] for v in self.verification if v.get("span")}
        known = [s for s in suspects if s is not None and s not in spans]
        mask = rows["subscription_id"].isin(known).fillna(False).astype(bool)
        for sub, span in spans.items():  # a missed rotation: only the requests beyond it
            t, edge = rows["received_at"], pd.Timestamp(span.get("after") or span["before"])
            beyond = (t > edge) if "after" in span else (t < edge)
            mask |= ((rows["subscription_id"] == sub) & beyond).fillna(False).astype(bool)
        if None in suspects:
            mask |= rows["subscription_id"].isna()
        if "verdict" in rows.columns:
            mask &= (rows["verdict"] != "unreadable").fillna(True).astype(bool)
        return mask

    def secrets_note(self) -> str:
        """One sentence for the reason of a control that leaves the suspects out."""
        return secrets_sentence(self.verification, self.secrets_file)

    def snapshot_note(self) -> dict[str, Any]:
        """Which snapshots were judged, and by which rule (for the evidence)."""
        times = sorted(pd.Timestamp(t) for t in self.snapshots["fetched_at"].dropna().unique())
        inside = bool(times) and times[0] >= self.period_start
        rule = "fetched in the period" if inside else "newest before the period, 7 days or less"
        return {"snapshots": [t.isoformat() for t in times], "snapshot_rule": rule}


# --------------------------------------------------------------------------------------------
# Helpers shared by the controls
# --------------------------------------------------------------------------------------------


def skip(reason: str, resource: str, **evidence: Any) -> Outcome:
    """A ``skip`` outcome: the data cannot answer."""
    return Outcome("skip", reason, resource, evidence)


def verdict(ok: bool, reason: str, resource: str, evidence: Mapping[str, Any]) -> Outcome:
    """``pass`` when ``ok``, else ``fail``."""
    return Outcome("pass" if ok else "fail", reason, resource, evidence)


def delivery_examples(rows: pd.DataFrame) -> dict[str, Any]:
    """Up to 20 delivery ids and, in the same order, their ``file:line``, each list with its
    true total (``examples_total``, ``example_records_total``: the number of rows).

    The Delivery-Id header is not authenticated (a replay or a tampered copy carries the
    original's), so the record's place in the capture files is given beside it.
    """
    total = len(rows)
    rows = rows.head(MAX_EXAMPLES)
    ids = rows["delivery_id"] if "delivery_id" in rows else pd.Series(pd.NA, index=rows.index)
    sources = rows["source"] if "source" in rows else pd.Series(pd.NA, index=rows.index)
    lines = rows["line"] if "line" in rows else pd.Series(pd.NA, index=rows.index)
    where = [
        f"{PurePath(src).name if isinstance(src, str) else '?'}:"
        f"{'?' if pd.isna(line) else int(line)}"
        for src, line in zip(sources, lines, strict=True)
    ]
    return {
        "examples": ["(none)" if pd.isna(v) else str(v) for v in ids],
        "examples_total": total,
        "example_records": where,
        "example_records_total": total,
    }


def _id_text(v: Any) -> str:
    return "(none)" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def ids(values: Iterable[Any]) -> list[str]:
    """Up to 20 distinct ids as strings, in the order given."""
    out: list[str] = []
    for v in values:
        s = _id_text(v)
        if s not in out:
            out.append(s)
        if len(out) == MAX_EXAMPLES:
            break
    return out


def distinct(values: Iterable[Any]) -> int:
    """How many distinct ids :func:`ids` would list without its cap (values as ids print).

    >>> distinct(pd.Series(["a", "b", "a", None, float("nan")]))
    3
    >>> distinct(["x", None, "x"])
    2
    """
    if isinstance(values, pd.Series):
        # unique() in pandas first (a 1M column), then each distinct value as its id prints
        uniq = values.drop_duplicates()
        if len(uniq) > 100_000:  # as many distinct values as rows: no Python string each
            return int(values.nunique(dropna=False))
        values = uniq
    return len(set(_id_text(v) for v in values))


def listed(name: str, values: Iterable[Any]) -> dict[str, Any]:
    """``{name: ids(values), name + "_total": distinct(values)}``: a capped list of ids with
    its true total (the convention of this module's docstring).

    >>> listed("incidents", [f"i{n}" for n in range(25)])["incidents_total"]
    25
    """
    if not isinstance(values, pd.Series):
        values = list(values)
    return {name: ids(values), f"{name}_total": distinct(values)}


def capped(name: str, items: list[Any]) -> dict[str, Any]:
    """``{name: items[:20], name + "_total": len(items)}``: a capped list with its true total.

    >>> capped("urls", list("abc"))
    {'urls': ['a', 'b', 'c'], 'urls_total': 3}
    """
    return {name: items[:MAX_EXAMPLES], f"{name}_total": len(items)}


def counts(series: pd.Series) -> dict[str, int]:
    """Value counts as ``{str(value): n}`` sorted by value; missing values count as "(none)"."""
    if series.dtype == object or pd.api.types.is_float_dtype(series.dtype):
        # as text first: True is not 1, and -0.0 is not 0.0 though they are equal
        series = series.where(series.notna(), "(none)").astype(str)
    out: dict[str, int] = {}
    # Counted on the column itself (no Python string per row: at 1M events the text copy was
    # the four-month store's report peak); values that print alike are counted together.
    tally = series.value_counts(dropna=False, sort=False)
    for value, n, missing in zip(tally.index, tally.to_numpy(), tally.index.isna(), strict=True):
        if n:  # a category that does not occur
            key = "(none)" if missing else str(value)
            out[key] = out.get(key, 0) + int(n)
    return dict(sorted(out.items()))


def pct(x: float) -> str:
    """A share as a percentage with 3 significant digits, never in scientific notation.

    >>> pct(0.125), pct(1e-7), pct(1.0)
    ('12.5%', '0.00001%', '100%')
    """
    shown = np.format_float_positional(
        x * 100, precision=3, unique=False, fractional=False, trim="-"
    )
    return f"{shown}%"


def quantiles(values: pd.Series) -> dict[str, float]:
    """n, p50, p95, p99 (linear interpolation, pandas' default) and max."""
    q = values.astype(float).quantile([0.5, 0.95, 0.99])
    return {
        "n": len(values),
        "p50": float(q.iloc[0]),
        "p95": float(q.iloc[1]),
        "p99": float(q.iloc[2]),
        "max": float(values.max()),
    }


def groups(frame: pd.DataFrame, column: str, missing: str) -> list[tuple[str, pd.DataFrame]]:
    """``frame`` grouped by ``column`` as strings (a missing value becomes ``missing``)."""
    key = frame[column].astype(object).where(frame[column].notna(), missing).astype(str)
    return [(str(k), g) for k, g in frame.groupby(key, sort=True)]


def iso(ts: Any) -> str:
    """A timestamp as ISO 8601."""
    return pd.Timestamp(ts).isoformat()


def _plain(value: Any) -> Any:
    """``value`` made of JSON types only: NaN/NA -> None, numpy -> Python, times -> ISO."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray | pd.Series):
        return [_plain(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, pd.Timestamp | dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def evidence_json(evidence: Mapping[str, Any]) -> str:
    """Evidence as a JSON string with sorted keys (reproducible); NaN becomes null."""
    return json.dumps(_plain(evidence), sort_keys=True, ensure_ascii=False, allow_nan=False)
