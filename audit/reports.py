"""The report pipeline: period -> papermill notebook -> HTML + findings + manifest -> index.

``DIR/<period>/<run id>/`` holds ``report.ipynb``, ``report.html``, ``findings.csv``,
``findings.json``, ``manifest.json``, ``inputs.json`` and ``tables/``. Each run is written to a
temporary folder and renamed into place, so a run folder is complete or absent; an earlier run
is never overwritten. A failed run is kept as ``<run id>.failed`` for diagnosis. A lock on
``DIR/.lock`` stops two runs on the same ``DIR`` at once. See ``docs/scheduling.md``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html
import importlib.metadata
import json
import os
import platform
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd

from audit.errors import ParameterError, ReportError

__all__ = [
    "EXIT_CONTROL_ERROR",
    "EXIT_FAILING",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "Period",
    "ReportResult",
    "build_index",
    "parse_period",
    "run_report",
    "versions",
]

EXIT_OK, EXIT_FAILING, EXIT_CONTROL_ERROR, EXIT_RUNTIME = 0, 1, 2, 3
SEVERITY_ORDER = ("info", "low", "medium", "high", "critical")
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "compliance_report.ipynb"
KERNEL = "python3"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Period:
    """A reporting period: ``[start, end)`` in UTC, and the label used as a folder name."""

    label: str
    start: pd.Timestamp
    end: pd.Timestamp


def _day(d: date) -> pd.Timestamp:
    if not 1678 <= d.year <= 2261:
        raise ParameterError(f"{d.isoformat()}: years 1678 to 2261 only")
    return pd.Timestamp(d.isoformat(), tz="UTC")


def _date(y: int, m: int, d: int, text: str) -> date:
    try:
        return date(y, m, d)
    except (ValueError, OverflowError):
        raise ParameterError(f"period {text!r}: not a valid date") from None


def parse_period(text: str, *, today: date | None = None) -> Period:
    """Parse ``2026-10``, ``2026-W44``, ``2026-10-01..2026-10-15`` (inclusive dates),
    ``previous-month`` or ``previous-week``.

    ``today`` is needed only for the relative forms; the CLI passes the wall-clock date (the
    one place it is read).

    >>> p = parse_period("2026-W44"); (p.start.date().isoformat(), p.end.date().isoformat())
    ('2026-10-26', '2026-11-02')
    >>> parse_period("previous-month", today=date(2026, 1, 15)).label
    '2025-12'
    """
    text = text.strip()
    if text in ("previous-month", "previous-week"):
        if today is None:
            raise ParameterError(f"{text} needs today's date")
        if text == "previous-month":
            first = today.replace(day=1)
            prev = (first - timedelta(days=1)).replace(day=1)
            return parse_period(f"{prev:%Y-%m}")
        monday = today - timedelta(days=today.weekday()) - timedelta(days=7)
        year, week, _ = monday.isocalendar()
        return parse_period(f"{year}-W{week:02d}")
    if m := re.fullmatch(r"(\d{4})-(\d{2})", text):
        y, mo = int(m[1]), int(m[2])
        if not 1 <= mo <= 12:
            raise ParameterError(f"period {text!r}: month must be 01 to 12")
        end = _date(y + (mo == 12), mo % 12 + 1, 1, text)
        return Period(text, _day(_date(y, mo, 1, text)), _day(end))
    if m := re.fullmatch(r"(\d{4})-W(\d{2})", text):
        try:
            start = date.fromisocalendar(int(m[1]), int(m[2]), 1)
            end = start + timedelta(days=7)
        except (ValueError, OverflowError):
            raise ParameterError(f"period {text!r}: no such ISO week") from None
        return Period(text, _day(start), _day(end))
    if m := re.fullmatch(r"(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})", text):
        try:
            a, b = date.fromisoformat(m[1]), date.fromisoformat(m[2])
            after = b + timedelta(days=1)
        except (ValueError, OverflowError):
            raise ParameterError(f"period {text!r}: not valid dates") from None
        if b < a:
            raise ParameterError(f"period {text!r}: the end is before the start")
        return Period(text, _day(a), _day(after))
    raise ParameterError(
        f"period {text!r}: use YYYY-MM, YYYY-Www, YYYY-MM-DD..YYYY-MM-DD, "
        "previous-month or previous-week"
    )


def versions() -> dict[str, str]:
    """The toolkit's and its main libraries' versions, and Python's."""
    out = {"python": platform.python_version()}
    for name in ("audit", "pandas", "numpy", "pyarrow", "matplotlib", "papermill", "nbconvert"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "unknown"
    return out


@contextlib.contextmanager
def _lock(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReportError(f"{out_dir}: another report run holds the lock") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ReportResult:
    """Where a run wrote, and how it ended."""

    exit_code: int
    run_dir: Path | None
    html: Path | None
    index: Path
    manifest: dict
    message: str = ""
    skipped: bool = False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _exit_code(findings: list[dict], fail_on: str) -> int:
    if any(f["status"] == "error" for f in findings):
        return EXIT_CONTROL_ERROR
    floor = SEVERITY_ORDER.index(fail_on)
    failing = [
        f
        for f in findings
        if f["status"] == "fail" and SEVERITY_ORDER.index(f["severity"]) >= floor
    ]
    return EXIT_FAILING if failing else EXIT_OK


def _to_html(notebook: Path, target: Path) -> None:
    """Convert without code, images inline, no remote script or style (opens offline)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="audit",
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
    )
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    target.write_text(body, encoding="utf-8")


def run_report(
    logs: Sequence[str | os.PathLike],
    *,
    secrets_path: str | os.PathLike,
    period: Period,
    out_dir: str | os.PathLike = "reports",
    snapshots: Sequence[str | os.PathLike] = (),
    params: Mapping[str, object] | None = None,
    mutes_path: str | os.PathLike | None = None,
    fail_on: str = "low",
    skip_if_exists: bool = False,
    notebook: str | os.PathLike = NOTEBOOK,
    timeout_s: int = 900,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ReportResult:
    """Run the compliance notebook for a period and publish it (see the module docstring).

    ``params`` may hold ``as_of``, ``client_id``, ``clock_start``, ``header_prefix`` and
    ``thresholds`` (control parameters). Secrets never go into parameters: only the path.

    Returns a :class:`ReportResult` whose ``exit_code`` follows the documented codes: 0 no failing
    finding at or above ``fail_on``, 1 failing findings, 2 a control errored, 3 a runtime failure.
    """
    if fail_on not in SEVERITY_ORDER:
        raise ParameterError(f"fail_on must be one of {', '.join(SEVERITY_ORDER)}")
    params = dict(params or {})
    unknown = set(params) - {"as_of", "client_id", "clock_start", "header_prefix", "thresholds"}
    if unknown:
        raise ParameterError(f"unknown report parameter(s): {', '.join(sorted(unknown))}")
    root = Path(out_dir).resolve()
    period_dir = root / period.label
    with _lock(root):
        done = sorted(
            p
            for p in (period_dir.glob("*/manifest.json") if period_dir.exists() else [])
            if not p.parent.name.endswith(".failed") and not p.parent.name.startswith(".")
        )
        if skip_if_exists and done:
            return ReportResult(
                EXIT_OK,
                done[-1].parent,
                done[-1].parent / "report.html",
                root / "index.html",
                json.loads(done[-1].read_text()),
                message=f"a report for {period.label} exists: {done[-1].parent}",
                skipped=True,
            )
        started = clock()
        run_id = f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        tmp = period_dir / f".tmp-{run_id}"
        tmp.mkdir(parents=True)
        nb_params = {
            "logs": [str(Path(p).resolve()) for p in logs],
            "secrets_path": str(Path(secrets_path).resolve()),
            "snapshots": [str(Path(p).resolve()) for p in snapshots],
            "period_start": period.start.isoformat(),
            "period_end": period.end.isoformat(),
            "mutes_path": str(Path(mutes_path).resolve()) if mutes_path else None,
            "out_dir": str(tmp),
            **params,
        }
        t0 = time.monotonic()
        message, code = "", EXIT_OK
        try:
            _execute(Path(notebook), tmp / "report.ipynb", nb_params, timeout_s)
            missing = [n for n in ("findings.json", "findings.csv") if not (tmp / n).is_file()]
            if missing:
                raise ReportError(f"the notebook did not write {', '.join(missing)}")
            _to_html(tmp / "report.ipynb", tmp / "report.html")
            findings = json.loads((tmp / "findings.json").read_text())
            code = _exit_code(findings, fail_on)
        except ReportError as e:
            message, code, findings = str(e), EXIT_RUNTIME, []
        manifest = _manifest(
            run_id, period, nb_params, tmp, findings, started, clock(), time.monotonic() - t0, code
        )
        final = period_dir / (run_id if code != EXIT_RUNTIME else f"{run_id}.failed")
        message = message.replace(str(tmp), str(final))
        manifest["message"] = message
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, final)
        index = build_index(root)
    html_path = final / "report.html"
    return ReportResult(
        code, final, html_path if html_path.exists() else None, index, manifest, message
    )


def _execute(notebook: Path, output: Path, parameters: dict, timeout_s: int) -> None:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    try:
        pm.execute_notebook(
            str(notebook),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL,
            progress_bar=False,
            cwd=str(output.parent),
            execution_timeout=timeout_s,
            start_timeout=120,
        )
    except PapermillExecutionError as e:
        raise ReportError(
            f"notebook cell {e.exec_count} raised {e.ename}: {str(e.evalue).splitlines()[0][:300]}"
            f" (partial notebook kept: {output})"
        ) from None
    except Exception as e:  # kernel death, timeout, missing kernel: one line, never a traceback
        raise ReportError(f"notebook execution failed: {type(e).__name__}: {e}"[:400]) from None


def _manifest(run_id, period, params, run_dir, findings, started, ended, duration, code) -> dict:
    inputs_file = run_dir / "inputs.json"
    inputs = json.loads(inputs_file.read_text()) if inputs_file.exists() else []
    counts: dict[str, dict[str, int]] = {"status": {}, "severity": {}}
    for f in findings:
        counts["status"][f["status"]] = counts["status"].get(f["status"], 0) + 1
        if f["status"] in ("fail", "error"):
            counts["severity"][f["severity"]] = counts["severity"].get(f["severity"], 0) + 1
    return {
        "run_id": run_id,
        "period": {
            "label": period.label,
            "start": period.start.isoformat(),
            "end": period.end.isoformat(),
        },
        "as_of": params.get("as_of") or period.end.isoformat(),
        "parameters": {k: v for k, v in params.items() if k != "out_dir"},
        "versions": versions(),
        "inputs": inputs,
        "started": started.isoformat(),
        "ended": ended.isoformat(),
        "duration_s": round(duration, 3),
        "findings": counts,
        "exit_status": code,
        "python": sys.executable,
    }


def build_index(root: Path) -> Path:
    """Rebuild ``root/index.html``: every run, newest first, with counts and links."""
    runs = []
    for manifest in root.glob("*/*/manifest.json"):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        runs.append((m.get("started", ""), manifest.parent, m))
    runs.sort(key=lambda r: r[0], reverse=True)
    rows = []
    for _, folder, m in runs:
        rel = folder.relative_to(root).as_posix()
        status = ", ".join(
            f"{k} {v}" for k, v in sorted(m.get("findings", {}).get("status", {}).items())
        )
        sev = ", ".join(
            f"{k} {v}" for k, v in sorted(m.get("findings", {}).get("severity", {}).items())
        )
        link = (
            f'<a href="{html.escape(rel)}/report.html">report</a>'
            if (folder / "report.html").exists()
            else "no report (failed)"
        )
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (m.get("period", {}).get("label"), m.get("run_id"), m.get("started"))
            )
            + f"<td>{html.escape(status)}</td><td>{html.escape(sev)}</td>"
            + f"<td>{html.escape(str(m.get('exit_status')))}</td>"
            + f'<td>{link} · <a href="{html.escape(rel)}/findings.csv">findings</a> · '
            + f'<a href="{html.escape(rel)}/manifest.json">manifest</a></td></tr>'
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>audit reports</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
        "<h1>Compliance reports</h1><table><thead><tr><th>period</th><th>run</th>"
        "<th>started</th><th>findings by status</th><th>failing by severity</th>"
        "<th>exit</th><th>files</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></body></html>\n"
    )
    tmp = root / f".index-{os.getpid()}.html"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, root / "index.html")
    return root / "index.html"
