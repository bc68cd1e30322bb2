"""What a report notebook shows: validated parameters, the computed run, and safe HTML views.

Notebooks stay thin: a ``parameters`` cell, then ``run = prepare(...)`` (validation, first
thing), ``ctx = compute(run)`` (load, verify, analyse, run the controls, write findings and
tables), then one call per section. Every view escapes attacker-controlled text and defangs
URLs before it reaches HTML.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from audit.analysis import Analysis, parse_as_of, run_analyses
from audit.errors import ParameterError
from audit.safe import defang, write_csv
from audit.secrets import read_secrets
from audit.spec import DEFAULT_HEADER_PREFIX
from audit.subscriptions import load_snapshots
from audit.verification import audit_signatures, verdict_counts

__all__ = ["ReportContext", "ReportRun", "compute", "prepare", "table"]

#: Columns whose values are URLs or domains: defanged in every view.
URL_COLUMNS = ("url", "domain", "safe_domain", "subject", "resource")
SEVERITIES = ("critical", "high", "medium", "low", "info")


@dataclass(frozen=True)
class ReportRun:
    """Validated report parameters (paths absolute, times UTC)."""

    logs: tuple[Path, ...]
    secrets_path: Path
    snapshots: tuple[Path, ...]
    period_start: pd.Timestamp
    period_end: pd.Timestamp
    as_of: pd.Timestamp
    client_id: str | None
    thresholds: Mapping[str, float]
    mutes_path: Path | None
    out_dir: Path | None
    header_prefix: str
    clock_start: str


def _ts(name: str, value: object) -> pd.Timestamp:
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ParameterError(f"{name} {value!r} is not an ISO 8601 date or time") from None
    if pd.isna(ts):
        raise ParameterError(f"{name} is missing")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _paths(name: str, value: object, *, must_exist: bool = True) -> tuple[Path, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str | os.PathLike) else value
    if not isinstance(items, Sequence):
        raise ParameterError(f"{name} must be a path or a list of paths")
    out = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise ParameterError(f"{name} must hold paths, not {type(item).__name__}")
        p = Path(item).expanduser()
        if must_exist and not p.exists() and not any(c in str(item) for c in "*?["):
            raise ParameterError(f"{name}: {item} does not exist")
        out.append(p.resolve() if p.exists() else p)
    return tuple(out)


def prepare(
    *,
    logs: object,
    secrets_path: object,
    period_start: object,
    period_end: object,
    snapshots: object = None,
    as_of: object = None,
    client_id: object = None,
    thresholds: object = None,
    mutes_path: object = None,
    out_dir: object = None,
    header_prefix: object = DEFAULT_HEADER_PREFIX,
    clock_start: object = "created",
) -> ReportRun:
    """Validate notebook parameters; raise one clear :class:`ParameterError` on the first bad one.

    Papermill does not validate parameters (``-p`` coerces only numbers and booleans, YAML keeps
    dates as strings), so this runs first in every notebook. Dates without a time are midnight
    UTC; ``period_end`` is exclusive. ``as_of`` defaults to ``period_end``.
    """
    log_paths = _paths("logs", logs)
    if not log_paths:
        raise ParameterError("logs: give at least one capture file, folder or glob")
    if not isinstance(secrets_path, str | os.PathLike) or not Path(secrets_path).is_file():
        raise ParameterError(f"secrets_path: {secrets_path!r} is not a file")
    start, end = _ts("period_start", period_start), _ts("period_end", period_end)
    if end <= start:
        raise ParameterError("period_end must be after period_start")
    when = end if as_of in (None, "") else parse_as_of(str(as_of))
    if when < start:
        raise ParameterError("as_of must not be before period_start")
    if thresholds is None:
        thresholds = {}
    if not isinstance(thresholds, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in thresholds.items()
    ):
        raise ParameterError("thresholds must map parameter names to numbers")
    if client_id is not None and not isinstance(client_id, str):
        raise ParameterError("client_id must be a string or None")
    if clock_start not in ("created", "burn"):
        raise ParameterError("clock_start must be 'created' or 'burn'")
    if not isinstance(header_prefix, str) or not header_prefix:
        raise ParameterError("header_prefix must be a non-empty string")
    mutes = _paths("mutes_path", mutes_path)
    return ReportRun(
        logs=log_paths,
        secrets_path=Path(secrets_path).resolve(),
        snapshots=_paths("snapshots", snapshots),
        period_start=start,
        period_end=end,
        as_of=when,
        client_id=client_id,
        thresholds=dict(thresholds),
        mutes_path=mutes[0] if mutes else None,
        out_dir=Path(out_dir).resolve() if out_dir else None,
        header_prefix=header_prefix,
        clock_start=clock_start,
    )


@dataclass(frozen=True)
class ReportContext:
    """Everything the sections show."""

    run: ReportRun
    analysis: Analysis
    findings: pd.DataFrame
    inputs: pd.DataFrame
    snapshots_inputs: pd.DataFrame = field(default_factory=pd.DataFrame)


def compute(run: ReportRun) -> ReportContext:
    """Load, verify, analyse as of ``run.as_of``, run the controls; write artefacts to out_dir.

    The whole log is read (retries and incidents spanning the period's edges need the records
    just outside it); the controls judge the period itself.
    """
    from audit.findings import read_mutes, run_controls

    audit = audit_signatures(run.logs, run.secrets_path, header_prefix=run.header_prefix)
    subs = load_snapshots(run.snapshots) if run.snapshots else None
    if subs is not None and run.client_id:
        subs = subs[subs["client_id"] == run.client_id]
    analysis = run_analyses(
        audit.deliveries,
        as_of=run.as_of,
        subscriptions=subs,
        inputs=audit.inputs,
        clock_start=run.clock_start,
    )
    store = read_secrets(run.secrets_path)
    findings = run_controls(
        analysis,
        period_start=run.period_start,
        period_end=run.period_end,
        params=run.thresholds,
        secrets_age=store.latest_valid_from(),
        mutes=read_mutes(run.mutes_path) if run.mutes_path else None,
    )
    ctx = ReportContext(run, analysis, findings, _all_inputs(run, audit.inputs))
    if run.out_dir is not None:
        write_artefacts(ctx, run.out_dir)
    return ctx


def _all_inputs(run: ReportRun, logs: pd.DataFrame) -> pd.DataFrame:
    """Every file the run read: logs (with records and unreadable lines), snapshots, mutes,
    and the secrets file (path and size only: a hash would let weak secrets be guessed)."""
    import hashlib

    from audit.subscriptions import snapshot_files

    rows = [logs.assign(kind="capture log")]
    extra: list[tuple[str, Path, bool]] = [("secrets", run.secrets_path, False)]
    if run.snapshots:
        extra += [("snapshot", p, True) for p in snapshot_files(run.snapshots)]
    if run.mutes_path:
        extra.append(("mutes", run.mutes_path, True))
    for kind, path, hashed in extra:
        blob = path.read_bytes()
        digest = hashlib.sha256(blob).hexdigest() if hashed else ""
        rows.append(
            pd.DataFrame([{"source": str(path), "size": len(blob), "sha256": digest, "kind": kind}])
        )
    return pd.concat(rows, ignore_index=True)


def write_artefacts(ctx: ReportContext, out_dir: Path) -> None:
    """findings.csv, findings.json, inputs.json and tables/*.csv (text cells neutralised)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    findings = ctx.findings
    write_csv(findings, out_dir / "findings.csv")
    records = json.loads(findings.to_json(orient="records", date_format="iso"))
    for rec in records:
        if isinstance(rec.get("evidence"), str):
            rec["evidence"] = json.loads(rec["evidence"])
    (out_dir / "findings.json").write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
    (out_dir / "inputs.json").write_text(
        ctx.inputs.to_json(orient="records", indent=2) + "\n", encoding="utf-8"
    )
    ctx.analysis.write(out_dir / "tables")


# --- views ----------------------------------------------------------------------------------


class HTML:
    """Minimal rich-display wrapper (what ``IPython.display.HTML`` does), importable anywhere."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_html_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


def _display_value(value: object, column: str) -> str:
    if value is None or (not isinstance(value, list | tuple | dict) and pd.isna(value)):
        return ""
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:,.4g}"
    text = str(value)
    if column in URL_COLUMNS or "://" in text or text.lower().startswith("javascript:"):
        text = str(defang(text))
    return text


def table(df: pd.DataFrame, *, max_rows: int = 50, caption: str | None = None) -> HTML:
    """An HTML table with every cell escaped and URLs defanged; long tables are cut, and say so.

    >>> str(table(pd.DataFrame({"url": ["https://e.example/<script>"]})))[:60]
    '<table class="audit"><thead><tr><th>url</th></tr></thead><tb'
    """
    shown = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = []
    for rec in shown.itertuples(index=False, name=None):
        cells = "".join(
            f"<td>{html.escape(_display_value(v, c))}</td>"
            for v, c in zip(rec, shown.columns, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    more = ""
    if len(df) > max_rows:
        more = f"<p><em>{len(df) - max_rows} more rows in the tables folder.</em></p>"
    if df.empty:
        return HTML(f"<p><em>{html.escape(caption or 'table')}: none.</em></p>")
    return HTML(
        f'<table class="audit">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


def summary(ctx: ReportContext) -> HTML:
    """Counts of findings by status and severity, then the failing findings, worst first."""
    f = ctx.findings
    counts = (
        f.pivot_table(index="status", columns="severity", values="check_id", aggfunc="count")
        .reindex(columns=[s for s in SEVERITIES if s in set(f["severity"])])
        .fillna(0)
        .astype(int)
        .reset_index()
    )
    failing = f[f["status"].isin(["fail", "error"])][
        ["check_id", "severity", "status", "title", "resource", "reason"]
    ]
    run = ctx.run
    head = (
        f"<p>Period <b>{run.period_start:%Y-%m-%d}</b> to <b>{run.period_end:%Y-%m-%d}</b> "
        f"(end exclusive), data judged as of <b>{run.as_of:%Y-%m-%d %H:%M} UTC</b>.</p>"
    )
    return HTML(
        head
        + str(table(counts, caption="Findings by status and severity"))
        + str(table(failing, max_rows=200, caption="Failing findings"))
    )


def findings_for(ctx: ReportContext, prefix: str) -> HTML:
    """The findings of one family of controls (``SIG``, ``DLV``, ``SUB``, ``TKD``)."""
    f = ctx.findings[ctx.findings["check_id"].str.startswith(prefix)]
    cols = ["check_id", "severity", "status", "resource", "reason"]
    return table(f[cols], max_rows=100, caption=f"{prefix} findings")


def verdicts(ctx: ReportContext) -> HTML:
    """Verdict counts and the non-valid requests (with what the receiver answered)."""
    d = ctx.analysis.deliveries
    bad = d[d["verdict"] != "valid"][
        ["source", "line", "received_at", "delivery_id", "verdict", "response_status", "detail"]
    ]
    counts = verdict_counts(d)
    counts["share"] = counts["share"].map(lambda x: f"{x:.2%}")
    return HTML(
        str(table(counts, caption="Verdicts"))
        + str(table(bad, max_rows=100, caption="Requests that are not valid"))
    )


def waiting_on_client(ctx: ReportContext) -> HTML:
    """Incidents currently waiting on the client, longest first."""
    inc = ctx.analysis.incidents
    waiting = inc[inc["status"].isin(["approval_required", "action_required"])].copy()
    waiting["awaiting_client_h"] = waiting["awaiting_client_s"] / 3600
    cols = ["incident_id", "status", "incident_class", "domain", "url", "awaiting_client_h"]
    return table(
        waiting.sort_values("awaiting_client_h", ascending=False)[cols],
        caption="Incidents waiting on the client",
    )


def takedown_text(ctx: ReportContext) -> HTML:
    """The clock start and end, and the KM quantiles with their bounds."""
    start = "incident creation" if ctx.run.clock_start == "created" else "takedown (burn) start"
    s = ctx.analysis.takedown_summary
    cols = [c for c in s.columns if c not in ("by",)]
    return HTML(
        f"<p>Time to takedown runs from <b>{start}</b> to <b>takedown success</b>; incidents "
        "not taken down are censored at their close or at as_of (Kaplan-Meier, 95% "
        "Greenwood log-log bands). Hours; empty means not reached.</p>"
        + str(table(s[cols], caption="Median and p90 time to takedown (hours)"))
    )


def appendix(ctx: ReportContext, parameters: Mapping[str, object]) -> HTML:
    """Inputs (file, size, sha256, records, unreadable), parameters and versions."""
    from audit.reports import versions

    params = pd.DataFrame(
        {
            "parameter": list(parameters),
            "value": [json.dumps(v, default=str) for v in parameters.values()],
        }
    )
    vers = pd.DataFrame({"package": list(versions()), "version": list(versions().values())})
    return HTML(
        str(table(ctx.inputs, max_rows=500, caption="Inputs"))
        + str(table(params, caption="Parameters"))
        + str(table(vers, caption="Versions"))
    )


class Figure:
    """Show a matplotlib Figure as an inline PNG (no pyplot, no backend state needed)."""

    def __init__(self, fig) -> None:
        self.fig = fig

    def _repr_png_(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        return buf.getvalue()


def figure(fig) -> Figure:
    """Wrap a Figure from :mod:`audit.plotting` for ``display``."""
    return Figure(fig)


def demo_inputs(seed: int = 7) -> dict[str, object]:
    """Parameters pointing at the built-in demo data (generated once into a temporary folder).

    Notebooks use this when their ``logs`` parameter is None, so an analyst can run them in
    JupyterLab straight away.
    """
    import tempfile

    from audit.demo import simulate

    root = Path(tempfile.gettempdir()) / f"audit-demo-seed{seed}"
    if not (root / "truth.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="audit-demo-"))
        shutil.rmtree(tmp)
        simulate(tmp, seed=seed)
        try:
            os.replace(tmp, root)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    truth = json.loads((root / "truth.json").read_text())
    return {
        "logs": [str(root / "captures")],
        "secrets_path": str(root / "secrets.json"),
        "snapshots": [str(root / "snapshots")],
        "period_start": truth["period"]["start"],
        "period_end": truth["period"]["end"],
    }


def delivery_tables(ctx: ReportContext) -> HTML:
    """Event outcomes, success rates by subscription and event type, latency percentiles."""
    from audit.deliveries import latency_summary, success_rates

    a = ctx.analysis
    real = a.events[~a.events["is_test"]]
    outcomes = real.groupby(["subscription_id", "outcome"]).size().rename("events").reset_index()
    bad = real[real["outcome"].isin(["exhausted", "lost"])][
        ["subscription_id", "event_id", "event", "incident_id", "attempts", "outcome"]
    ]
    return HTML(
        str(table(outcomes, caption="Event outcomes"))
        + str(table(bad, max_rows=100, caption="Events never delivered"))
        + str(
            table(
                success_rates(a.deliveries, a.events, by="subscription"), caption="By subscription"
            )
        )
        + str(table(success_rates(a.deliveries, a.events, by="event"), caption="By event type"))
        + str(table(latency_summary(a.deliveries, a.events), caption="Latency percentiles"))
    )


def retry_tables(ctx: ReportContext) -> HTML:
    """Attempts off schedule or above five, and events retried after a timely 2xx."""
    a = ctx.analysis
    d = a.deliveries
    off = d[(d["on_schedule"] == False) | (d["attempt_no"] > 5)][  # noqa: E712
        ["subscription_id", "event_id", "attempt_no", "delay_s", "expected_delay_s", "received_at"]
    ]
    again = a.events[a.events["retry_after_success"]][["subscription_id", "event_id", "attempts"]]
    return HTML(
        str(table(off, caption="Attempts off the published schedule"))
        + str(table(again, caption="Events retried after a timely 2xx (vendor fault)"))
    )


def subscriptions_view(ctx: ReportContext) -> HTML:
    """The latest snapshot's subscriptions."""
    s = ctx.analysis.subscriptions
    if s.empty:
        return HTML("<p><em>No listing snapshot was given: subscription controls skipped.</em></p>")
    latest = s[s["fetched_at"] == s["fetched_at"].max()].copy()
    latest["events"] = latest["events"].map(lambda e: ", ".join(e) if isinstance(e, tuple) else e)
    cols = ["subscription_id", "url", "active", "events", "last_delivery_status", "secret_exposed"]
    return table(
        latest[cols], caption=f"Subscriptions at {latest['fetched_at'].iloc[0]:%Y-%m-%d %H:%M} UTC"
    )
