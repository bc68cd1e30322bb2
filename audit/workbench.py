"""The analyst's workbench: one call loads, verifies and analyses; the tables are DataFrames.

``audit.open(store=...)`` or ``audit.open(logs=..., secrets=...)`` returns a :class:`Workbench`:

- tables (pandas DataFrames, read-only attributes): ``deliveries``, ``attempts``, ``events``,
  ``incidents``, ``status_intervals``, ``takedown_durations``, ``subscriptions``, ``findings``,
  ``inputs``; ``period`` (an :class:`~audit.report.params.Period`), ``as_of``, ``notes``;
  ``verdict``, and the findings' ``severity`` and ``status``, are ordered categoricals
  (:data:`VERDICT_ORDER`, :data:`FINDING_ORDER`);
- ``km(by=None)``: Kaplan-Meier table of time to takedown (``time_h``, hours), overall or by a
  column;
- drill-down: ``event(id)``, ``incident(id)``, ``subscription(id)`` return a :class:`Timeline`,
  one row per request received (and, for an incident, per status it held), with the raw requests
  as ``.evidence``.

The figures that take these frames are in :mod:`audit.figures`. Everything here wraps the lower
layer: the report's load (:func:`audit.report.inputs.load_inputs`) and computation
(:func:`audit.report.compute.compute`: the analyses of :mod:`audit.analysis` and the controls of
:mod:`audit.findings`), cut to the period as the report cuts it
(:func:`audit.report.tables.deliveries_in_period`).

Progress: loads that take more than about 2 s draw a ``tqdm`` bar in an interactive session
(standard error a terminal, or a Jupyter kernel: a widget with ``ipywidgets``, else text, never
tqdm's ``IProgress not found`` warning: :func:`audit.progress.bar_class`) unless the
environment variable ``AUDIT_PROGRESS`` is ``off`` (or ``0``, ``no``, ``false``);
``progress=False`` silences it.
A Jupyter kernel driven by papermill looks like any other: notebooks run under papermill pass
``progress=False`` (or run with ``AUDIT_PROGRESS=off``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import pandas as pd

from audit.analysis.analyze import read_store
from audit.analysis.coverage import coverage_alerts
from audit.analysis.subscriptions import load_snapshots
from audit.analysis.survival_by import kaplan_meier_by
from audit.errors import ParameterError
from audit.findings.catalogue import SEVERITIES
from audit.findings.runner import STATUSES
from audit.ingest.load import LoadWarning, expand_paths, load_captures
from audit.ingest.query import latest_receipt, not_valid_evidence
from audit.ingest.scan import frame_from_arrow, open_store, scan
from audit.ingest.verdict_rules import VERDICTS
from audit.ingest.verification import verdict_counts
from audit.paths import local_folder, resolved_name
from audit.progress import bar_class
from audit.redaction import cut_secrets, shown
from audit.report.compute import compute
from audit.report.explore import demo_inputs
from audit.report.inputs import Inputs, load_inputs
from audit.report.params import Period, check_params, parse_period
from audit.report.tables import deliveries_in_period, in_period
from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = ["Timeline", "Workbench", "open"]

#: A load shorter than this draws no progress bar (seconds).
PROGRESS_DELAY_S = 2.0

#: The request columns kept out of the analyses, read again for a timeline's ``.evidence``.
_RAW_COLUMNS = (
    "delivery_id",
    "url",
    "signature",
    "timestamp_header",
    "event_header",
    "body",
)

#: A timeline's columns, in order (those a frame lacks are left out).
_TIMELINE_COLUMNS = (
    "received_at",
    "kind",
    "subscription_id",
    "event_id",
    "event",
    "incident_id",
    "verdict",
    "detail",
    "attempt_no",
    "on_schedule",
    "delay_s",
    "expected_delay_s",
    "missing_before",
    "response_status",
    "response_ms",
    "success",
    "status",
    "source",
    "line",
)

#: The columns handed out as ordered categoricals, and their order: each sorts and compares by
#: what it means, not by the alphabet (``docs/analysis.md``). A verdict in the order the checks
#: run (``unreadable`` first); a finding's severity from ``info`` up to ``critical`` (so that
#: ``severity >= "high"`` means high or critical), and its status as the runner lists them.
VERDICT_ORDER: dict[str, tuple[str, ...]] = {"verdict": VERDICTS}
FINDING_ORDER: dict[str, tuple[str, ...]] = {
    "severity": tuple(reversed(SEVERITIES)),
    "status": STATUSES,
}

#: Seconds in the unit of the figures' time axes (hours): ``km()``'s ``time_h``.
_S_PER_H = 3600.0


class Timeline(pd.DataFrame):
    """A drill-down: one row per request received (``kind`` "request") or, for an incident, per
    status it held (``kind`` "status", at the status's start), in time order.

    ``evidence``: the raw requests of the rows (``source, line``, the headers as captured, the
    body bytes exactly as signed, and ``record_sha256``, what each is known by and joined by),
    one row per request; kept through slicing.
    """

    _metadata: ClassVar[list[str]] = ["evidence"]
    evidence: pd.DataFrame

    @property
    def _constructor(self) -> type[Timeline]:
        return Timeline


def ordered(frame: pd.DataFrame, orders: dict[str, tuple[str, ...]]) -> pd.DataFrame:
    """``frame`` with each column of ``orders`` it has as an ordered categorical in that order
    (a value outside the order comes after it, sorted, rather than being lost)."""
    columns = {}
    for name, order in orders.items():
        if name in frame.columns:
            extra = sorted({str(v) for v in frame[name].dropna()} - set(order))
            dtype = pd.CategoricalDtype([*order, *extra], ordered=True)
            columns[name] = frame[name].astype(dtype)
    return frame.assign(**columns) if columns else frame


def _check_id(name: str, value: object) -> None:
    """ParameterError (one line) unless ``value`` is one id: a string."""
    if not isinstance(value, str):
        raise ParameterError(f"{name}: give one id as a string, not a {type(value).__name__}")


def _view(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as the caller sees it: a shallow copy, which copy-on-write (pandas 3) turns
    into a copy of whatever the caller changes, so the workbench's own tables never move."""
    return frame.copy(deep=False)


@dataclass(frozen=True)
class _Source:
    """Where the workbench's data came from: a store folder, or capture files by ``source``."""

    store: str | None
    files: dict[str, Path] = field(default_factory=dict)
    header_prefix: str = DEFAULT_HEADER_PREFIX


@dataclass(frozen=True)
class _Tables:
    """The frames a :class:`Workbench` shows (cut to its period)."""

    deliveries: pd.DataFrame
    events: pd.DataFrame
    incidents: pd.DataFrame
    status_intervals: pd.DataFrame
    takedown_durations: pd.DataFrame
    subscriptions: pd.DataFrame
    findings: pd.DataFrame
    inputs: pd.DataFrame


class Workbench:
    """What :func:`open` loaded: the period's tables as DataFrames, and drill-downs.

    Built by :func:`open`, not directly.
    """

    def __init__(
        self,
        tables: _Tables,
        *,
        period: Period,
        as_of: pd.Timestamp,
        source: _Source,
        notes: tuple[str, ...] = (),
        alerts: tuple[str, ...] = (),
    ) -> None:
        self._alerts = alerts  # the evidence's own coverage (audit.analysis.coverage)
        self._t = tables
        # What the attributes hand out: the verdict, severity and status as ordered categoricals
        # (the methods below work on the tables as computed).
        self._shown = dataclasses.replace(
            tables,
            deliveries=ordered(tables.deliveries, VERDICT_ORDER),
            findings=ordered(tables.findings, FINDING_ORDER),
        )
        self._period = period
        self._as_of = as_of
        self._source = source
        self._notes = notes

    # -- the tables -------------------------------------------------------------------------

    @property
    def period(self) -> Period:
        """The period analysed: ``label``, ``start`` and ``end`` (exclusive), UTC."""
        return self._period

    @property
    def as_of(self) -> pd.Timestamp:
        """The time the analyses are made as of (default: the latest receipt of the period)."""
        return self._as_of

    @property
    def notes(self) -> tuple[str, ...]:
        """What the load and the analyses warned about, one line each."""
        return self._notes

    @property
    def deliveries(self) -> pd.DataFrame:
        """Every request received in the period, verified, with the attempt columns
        (``docs/tables.md``: deliveries and attempts); ``verdict`` an ordered categorical in
        the order the checks run."""
        return _view(self._shown.deliveries)

    @property
    def attempts(self) -> pd.DataFrame:
        """The valid deliveries with an event id: the rows attempt inference numbers."""
        d = self._shown.deliveries
        return _view(d[(d["verdict"] == "valid") & d["event_id"].notna()])

    @property
    def events(self) -> pd.DataFrame:
        """One row per (subscription, event id) first received in the period."""
        return _view(self._t.events)

    @property
    def incidents(self) -> pd.DataFrame:
        """The incidents the period's valid deliveries speak of, folded from their events
        (with the earlier events of each)."""
        return _view(self._t.incidents)

    @property
    def status_intervals(self) -> pd.DataFrame:
        """Each of those incidents' statuses over time."""
        return _view(self._t.status_intervals)

    @property
    def takedown_durations(self) -> pd.DataFrame:
        """Time to takedown of those incidents, right-censored (``duration_s``, ``observed``)."""
        return _view(self._t.takedown_durations)

    @property
    def subscriptions(self) -> pd.DataFrame:
        """The listing snapshots' rows (empty without ``snapshots``)."""
        return _view(self._t.subscriptions)

    @property
    def findings(self) -> pd.DataFrame:
        """The controls' findings over the period (``evidence`` as JSON text); ``severity``
        (``info`` < ``low`` < ``medium`` < ``high`` < ``critical``) and ``status`` ordered
        categoricals."""
        return _view(self._shown.findings)

    @property
    def inputs(self) -> pd.DataFrame:
        """Every file read: ``source, size, sha256, records, unreadable, kind``."""
        return _view(self._t.inputs)

    def km(self, by: str | None = None) -> pd.DataFrame:
        """Kaplan-Meier table of time to takedown, one group ``all`` or one per value of the
        column ``by`` of :attr:`takedown_durations` (e.g. ``incident_class``): ``group``,
        ``time_h`` (hours, the unit of the figures' axes), ``at_risk``, ``events``,
        ``censored``, ``survival``, ``ci_lower``, ``ci_upper``. A group too small to trust is
        a :class:`~audit.analysis.survival.SmallSampleWarning` at the caller's line.
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            km = kaplan_meier_by(self._t.takedown_durations, by)
        for w in caught:  # told at the caller's line, not at this one (a notebook shows it)
            warnings.warn(w.message, w.category, stacklevel=2)
        return km.assign(time=km["time"] / _S_PER_H).rename(columns={"time": "time_h"})

    def verdict_counts(self) -> pd.DataFrame:
        """Requests of the period by verdict: ``verdict, count, share``, in check order
        (``verdict`` an ordered categorical)."""
        return ordered(verdict_counts(self._t.deliveries), VERDICT_ORDER)

    # -- drill-down -------------------------------------------------------------------------

    def event(self, event_id: str) -> Timeline:
        """Every request that carried ``event_id``, in time order, with ``.evidence``."""
        _check_id("event_id", event_id)
        d = self._t.deliveries
        rows = d[d["event_id"] == event_id]
        if rows.empty:
            raise ParameterError(f"no event {shown(event_id)} in {self._where()}")
        return self._timeline(rows)

    def incident(self, incident_id: str) -> Timeline:
        """Every request about ``incident_id`` and every status it held, in time order, with
        the requests' ``.evidence``."""
        _check_id("incident_id", incident_id)
        d = self._t.deliveries
        rows = d[d["incident_id"] == incident_id]
        known = (self._t.incidents["incident_id"] == incident_id).any()
        if rows.empty and not known:
            raise ParameterError(f"no incident {shown(incident_id)} in {self._where()}")
        si = self._t.status_intervals
        held = si[si["incident_id"] == incident_id]
        statuses = pd.DataFrame(
            {
                "received_at": held["start"],
                "kind": "status",
                "incident_id": held["incident_id"],
                "status": held["status"],
                "detail": [
                    f"{'announced' if a else 'inferred'}, {pd.Timedelta(seconds=s)}"
                    + (" (current)" if c else "")
                    for a, s, c in zip(
                        held["announced"], held["duration_s"], held["current"], strict=True
                    )
                ],
            }
        )
        return self._timeline(rows, statuses)

    def subscription(self, subscription_id: str) -> Timeline:
        """Every request of ``subscription_id``, in time order, with ``.evidence``."""
        _check_id("subscription_id", subscription_id)
        d = self._t.deliveries
        rows = d[d["subscription_id"] == subscription_id]
        if rows.empty:
            raise ParameterError(f"no subscription {shown(subscription_id)} in {self._where()}")
        return self._timeline(rows)

    def _where(self) -> str:
        return f"the deliveries of {self._period.label}"

    def _timeline(self, rows: pd.DataFrame, extra: pd.DataFrame | None = None) -> Timeline:
        raw = _raw_requests(self._source, rows)
        # By what each record is (a rotated or truncated log repeats a source and line; a line
        # repeated within a file is two rows of one record, the same request).
        requests = rows.merge(raw, on="record_sha256", how="left", validate="many_to_one")
        requests["kind"] = "request"
        requests["status"] = requests["body"].map(_status_carried)
        frames = [requests] if extra is None or extra.empty else [requests, extra]
        t = pd.concat(frames, ignore_index=True) if len(frames) > 1 else requests
        t = t.sort_values(["received_at", "kind"], kind="stable", na_position="last")
        t["line"] = t["line"].astype("Int64")  # a status row has none: not 23.0
        t = ordered(t, VERDICT_ORDER)
        out = Timeline(t[[c for c in _TIMELINE_COLUMNS if c in t.columns]].reset_index(drop=True))
        ev = ["source", "line", "received_at", "verdict", *_RAW_COLUMNS, "record_sha256"]
        out.evidence = ordered(
            cut_secrets(
                requests.sort_values("received_at", kind="stable", na_position="last")[
                    ev
                ].reset_index(drop=True)
            ),
            VERDICT_ORDER,
        )
        return out

    # -- what was loaded ----------------------------------------------------------------------

    def _summary(self) -> list[tuple[str, str]]:
        p = self._period
        counts = self.verdict_counts()
        by = ", ".join(
            f"{v} {int(n):,}" for v, n in zip(counts["verdict"], counts["count"], strict=True)
        )
        files = self._t.inputs
        logs = files[files["kind"] == "capture log"] if "kind" in files else files
        kinds = files["kind"].value_counts() if "kind" in files else pd.Series(dtype=int)
        inputs = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
        if self._source.store is not None:
            inputs += f" (store {self._source.store})"
        return [
            (
                "loaded",
                f"{len(self._t.deliveries):,} deliveries, {len(self._t.events):,} events, "
                f"{len(self._t.incidents):,} incidents",
            ),
            ("period", f"{p.label} ({p.start:%Y-%m-%d %H:%M} to {p.end:%Y-%m-%d %H:%M} UTC)"),
            ("as of", f"{self._as_of:%Y-%m-%d %H:%M:%S} UTC"),
            ("by verdict", by or "none"),
            ("inputs", f"{inputs}; {int(logs['records'].sum()) if len(logs) else 0:,} records"),
            *(("warning", a) for a in self._alerts),
        ]

    def __repr__(self) -> str:
        return "\n".join(
            [
                f"<audit.Workbench> {k}: {v}" if i == 0 else f"  {k}: {v}"
                for i, (k, v) in enumerate(self._summary())
            ]
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._summary()
        )
        return f"<table><caption>audit.Workbench</caption>{rows}</table>"


def _status_carried(body: object) -> str | None:
    """``data.status`` of a request body (None when the body is not such JSON)."""
    if not isinstance(body, bytes | str):
        return None
    try:
        envelope = json.loads(body)
    except ValueError:
        return None
    data = envelope.get("data") if isinstance(envelope, dict) else None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, str) else None


def _raw_requests(source: _Source, rows: pd.DataFrame) -> pd.DataFrame:
    """``record_sha256`` and :data:`_RAW_COLUMNS` of the records of ``rows`` (one row per
    record), read again by their ``record_sha256``, never by source and line (a log rotated by
    ``copytruncate``, truncated or rewritten, or two receivers' same-named files, repeat
    those): from the store's parts, or from the capture files the rows came from."""
    ids = sorted(set(rows["record_sha256"].dropna().astype(str)))
    columns = ["record_sha256", *(c for c in _RAW_COLUMNS if c not in rows.columns)]
    if source.store is not None:
        where = "WHERE list_contains(?, record_sha256)"
        read = ["source", "line", *columns]  # the scan orders rows by where they were seen
        got = frame_from_arrow(scan(open_store(source.store).parts(), read, where, [ids]))
    else:
        files = [source.files[s] for s in sorted(set(rows["source"])) if s in source.files]
        with warnings.catch_warnings():  # said when the files were first read
            warnings.simplefilter("ignore", LoadWarning)
            got = load_captures(
                files, header_prefix=source.header_prefix, workers=1, record_sha256=True
            ).deliveries
        got = got.loc[got["record_sha256"].isin(ids), columns]
    return got[columns].drop_duplicates("record_sha256").reset_index(drop=True)


# -- open -------------------------------------------------------------------------------------


def _day(value: object, name: str) -> pd.Timestamp:
    """A period bound: a date or a time (UTC when it has no offset)."""
    try:
        ts = pd.Timestamp(value)  # type: ignore[arg-type]  # checked: any value may come
    except (ValueError, TypeError, OverflowError):
        raise ParameterError(
            f"period {name} {shown(value)} is not an ISO 8601 date or time"
        ) from None
    if pd.isna(ts):
        raise ParameterError(f"period {name} is missing")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _label(start: pd.Timestamp, end: pd.Timestamp) -> str:
    """``2026-10-01..2026-10-07`` (inclusive days) for whole days, else the two times."""
    if start == start.normalize() and end == end.normalize():
        return f"{start:%Y-%m-%d}..{end - pd.Timedelta(days=1):%Y-%m-%d}"
    return f"{start.isoformat()}..{end.isoformat()}"


def _period(value: object) -> Period | None:
    """The ``period`` argument of :func:`open` (None: all the data)."""
    if value is None or isinstance(value, Period):
        return value
    if isinstance(value, str):
        return parse_period(value)
    if isinstance(value, tuple | list) and len(value) == 2:
        start, end = _day(value[0], "start"), _day(value[1], "end")
        if end <= start:
            raise ParameterError("period: the end must be after the start")
        return Period(_label(start, end), start, end)
    raise ParameterError(
        "period: use '2026-10', '2026-W41', '2026-10-01..2026-10-15' or a (start, end) pair"
    )


def _data_period(deliveries: pd.DataFrame) -> Period:
    """The whole days from the first receipt to the last."""
    times = deliveries["received_at"].dropna()
    if times.empty:
        raise ParameterError("no delivery with a receipt time: give a period")
    start = pd.Timestamp(times.min()).normalize()
    end = pd.Timestamp(times.max()).normalize() + pd.Timedelta(days=1)
    return Period(_label(start, end), start, end)


def _paths(value: object, name: str) -> list[str | os.PathLike[str]]:
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise ParameterError(f"{name}: a path or a list of paths, not {type(value).__name__}")


def _interactive() -> bool:
    """Whether a person is likely watching: standard error a terminal, or a Jupyter kernel;
    never with ``AUDIT_PROGRESS=off``."""
    if os.environ.get("AUDIT_PROGRESS", "").strip().lower() in ("off", "0", "no", "false"):
        return False
    err = sys.stderr
    if err is not None and hasattr(err, "isatty") and err.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class _Steps:
    """The load's steps, counted on a progress bar (or on nothing)."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def step(self, what: str) -> None:
        """One step done; ``what`` is under way."""
        if self._bar is not None:
            self._bar.set_description(f"audit.open: {what}", refresh=False)
            self._bar.update(1)


def _ticking(bar: Any, stop: threading.Event) -> None:
    """Draw ``bar`` once the delay is over, then every second (its elapsed time moving) until
    ``stop``: the first step (the read) is most of a long load, and counts nothing."""
    if stop.wait(PROGRESS_DELAY_S):
        return
    while True:
        bar.refresh()
        if stop.wait(1.0):
            return


@contextlib.contextmanager
def _progress(progress: bool | None, total: int) -> Iterator[_Steps]:
    """A bar shown after :data:`PROGRESS_DELAY_S` when ``progress`` (None: when interactive)."""
    show = _interactive() if progress is None else bool(progress)
    if not show:
        yield _Steps(None)
        return
    tqdm = bar_class()  # a widget with ipywidgets, else text; never a TqdmWarning
    if tqdm is None:
        yield _Steps(None)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bar = tqdm(total=total, delay=PROGRESS_DELAY_S, desc="audit.open: reading", leave=False)
    stop = threading.Event()
    ticker = threading.Thread(target=_ticking, args=(bar, stop), daemon=True)
    ticker.start()
    try:
        yield _Steps(bar)
    finally:
        stop.set()
        ticker.join()
        bar.close()


def _store_inputs(
    store: str, upto: pd.Timestamp, start: pd.Timestamp | None, subs: pd.DataFrame
) -> Inputs:
    """The inputs of a store read without a secrets file (nothing verified again)."""
    got = read_store(store, start=start, end=upto)
    files = got.inputs.assign(kind="capture log").astype(
        {"records": "Int64", "unreadable": "Int64"}
    )
    evidence = not_valid_evidence(store, start=start, end=upto)
    return Inputs(got.deliveries, subs, files, {}, None, evidence, got.first_receipts)


def open(  # audit.open, as the issue names it
    *,
    store: str | os.PathLike[str] | None = None,
    logs: object = None,
    secrets: str | os.PathLike[str] | None = None,
    snapshots: object = None,
    period: object = None,
    as_of: object = None,
    progress: bool | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    clock_start: str = "created",
) -> Workbench:
    """Load, verify and analyse capture logs or an evidence store; a :class:`Workbench`.

    Give ``store`` (an evidence store folder) or ``logs`` (capture files, folders or globs),
    not both; neither opens the built-in demo data (a month, simulated once into the temporary
    folder: :func:`audit.report.explore.demo_inputs`). ``secrets``: the secrets file, needed
    with ``logs``; with ``store`` it verifies again the stored records whose secrets changed
    (the store is then written).
    ``snapshots``: listing snapshot files or folders. ``period``: None for all the data (the
    whole days from the first receipt to the last), else ``"2026-10"``, ``"2026-W41"``,
    ``"2026-10-01..2026-10-15"`` (inclusive days) or a ``(start, end)`` pair of dates or ISO
    times, the end excluded. ``as_of``: an ISO time with an offset (default: the latest receipt
    up to the period's end). ``progress``: see the module's docstring.

    A user's mistake is a one-line :class:`~audit.errors.AuditError`.

    Examples
    --------
    >>> import tempfile, warnings
    >>> from audit.demo.simulate import simulate
    >>> with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
    ...     demo = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     a = open(logs=demo.captures, secrets=demo.secrets, progress=False)
    >>> a.period.label, len(a.deliveries), len(a.incidents)
    ('2026-10-02..2026-10-07', 464, 20)
    """
    if store is not None and logs is not None:
        raise ParameterError("give store (a store folder) or logs (capture files), not both")
    if store is None and logs is None:  # the built-in demo data
        demo = demo_inputs()
        logs = [str(p) for p in cast("list[str]", demo["logs"])]
        secrets = str(demo["secrets_path"])
        snapshots = [str(p) for p in cast("list[str]", demo["snapshots"])]
    if logs is not None and secrets is None:
        raise ParameterError("secrets is missing: the secrets file the logs are verified with")
    wanted = _period(period)
    when = None
    if as_of is not None:
        when = check_params({"as_of": as_of}, wanted or _ANY).as_of
    log_list = _paths(logs, "logs")
    subs = load_snapshots(_paths(snapshots, "snapshots"))
    with _progress(progress, 3) as steps, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        upto = when if when is not None else (None if wanted is None else wanted.end)
        start = None if wanted is None else wanted.start
        files: dict[str, Path] = {}
        if store is not None:
            folder = os.fspath(local_folder(store))  # a URL: one line, as the CLI says it
            if upto is None:
                upto = latest_receipt(folder)
                if upto is None:
                    raise ParameterError(f"{folder}: the store holds no readable record")
            if secrets is None:
                inputs = _store_inputs(folder, upto, start, subs)
            else:
                inputs = load_inputs(
                    [],
                    secrets_path=secrets,
                    snapshots=_paths(snapshots, "snapshots"),
                    header_prefix=header_prefix,
                    store=folder,
                    start=start,
                    end=upto,
                )
        else:
            folder = None
            files = {resolved_name(p): p for p in expand_paths(log_list)}
            inputs = load_inputs(
                log_list,
                secrets_path=secrets,  # type: ignore[arg-type]  # checked above: given with logs
                snapshots=_paths(snapshots, "snapshots"),
                header_prefix=header_prefix,
                end=upto,
            )
        steps.step("analysing")
        d = inputs.deliveries
        assert d is not None  # just loaded
        chosen = wanted if wanted is not None else _data_period(d)
        if when is None:  # the latest receipt; a period without any: its end (nothing is cut)
            latest = d["received_at"].max()
            quiet = pd.isna(latest) or pd.Timestamp(latest) < chosen.start
            when = chosen.end if quiet else pd.Timestamp(latest)
        params = check_params(
            {"as_of": when.isoformat(), "header_prefix": header_prefix, "clock_start": clock_start},
            Period(chosen.label, min(chosen.start, when), chosen.end),
        )
        computed = compute(inputs, params, chosen)
        steps.step("cutting to the period")
        tables = _cut(computed.analysis, chosen, computed.findings, computed.tables["inputs"])
        steps.step("done")
    notes = tuple(dict.fromkeys([*inputs.notes, *computed.notes, *_lines(caught)]))
    source = _Source(folder, files, header_prefix)
    cov = computed.coverage
    alerts = coverage_alerts(cov.get("capture"), cov.get("verification", {}).get("sentence", ""))
    return Workbench(
        tables, period=chosen, as_of=params.as_of, source=source, notes=notes, alerts=(*alerts,)
    )


#: A stand-in period for checking ``as_of`` before the period is known.
_ANY = Period("any", pd.Timestamp("1970-01-01", tz="UTC"), pd.Timestamp("2200-01-01", tz="UTC"))


def _lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message).splitlines()[0] for w in caught if str(w.message)]


def _cut(analysis: Any, period: Period, findings: pd.DataFrame, inputs: pd.DataFrame) -> _Tables:
    """The analysis's tables cut to ``period`` (see the :class:`Workbench` attributes)."""
    d = deliveries_in_period(analysis.deliveries, period, analysis.inputs).reset_index(drop=True)
    e = analysis.events
    events = e[in_period(e["first_received_at"], period)].reset_index(drop=True)
    spoken = set(d.loc[d["verdict"] == "valid", "incident_id"].dropna())
    inc = analysis.incidents
    incidents = inc[inc["incident_id"].isin(spoken)].reset_index(drop=True)
    si = analysis.status_intervals
    td = analysis.takedown_durations
    findings = findings.copy()
    if "evidence" in findings.columns:
        findings["evidence"] = findings["evidence"].map(
            lambda v: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
        )
    # Known secrets out of every table: captured incident data may quote one (as the report).
    return _Tables(
        deliveries=cut_secrets(d),
        events=cut_secrets(events),
        incidents=cut_secrets(incidents),
        status_intervals=cut_secrets(si[si["incident_id"].isin(spoken)].reset_index(drop=True)),
        takedown_durations=cut_secrets(td[td["incident_id"].isin(spoken)].reset_index(drop=True)),
        subscriptions=cut_secrets(analysis.subscriptions),
        findings=cut_secrets(findings),
        inputs=inputs,
    )
