"""The run folder: what the pipeline writes and the only thing the report notebook reads.

Layout of ``DIR/<period>/<run id>/``::

    findings.json, findings.csv   the findings (exit code decided from them, in memory)
    findings.ocsf.json            the same as OCSF Compliance Findings, for SIEMs
    trend.json                    new, resolved, persisting failures against the previous period
    manifest.json                 run id, period, as_of, parameters, inputs with sha256, counts,
                                  versions, notebook and its sha256, rendering status
    tables/<name>.parquet         every table, whole
    tables/<name>.csv             the same, as CSV, for every table but those only drawn
                                  (:data:`PARQUET_ONLY`): every list the report cuts is
                                  here in full
    report.ipynb, report.html     the rendered notebook (absent when rendering failed)

:func:`open_run` reads a run folder back as a :class:`RunData` for the views.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow.parquet as pq

from audit.errors import OutputError, ParameterError, ReportError
from audit.findings.ocsf import ocsf_findings
from audit.ingest.workers import threads
from audit.report.params import Period, ReportParams
from audit.report.trend import TREND_KINDS, trend_for
from audit.safe import write_csv
from audit.tables import longest_first

if TYPE_CHECKING:  # annotations only: the run folder is written from what compute returns
    from audit.report.compute import Computed

__all__ = [
    "PARQUET_ONLY",
    "RunData",
    "finding_counts",
    "findings_records",
    "open_run",
    "versions",
    "write_json",
    "write_run",
    "write_tables",
]


def write_json(path: Path, data: object) -> None:
    """Sorted, indented JSON, written to a new temporary file and renamed into place.

    The temporary file has a random name and is created, never opened if something is there
    (``O_EXCL``, ``O_NOFOLLOW``): a link planted in a run folder is never written through."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def findings_records(findings: pd.DataFrame) -> list[dict[str, Any]]:
    """Findings as JSON records; ``evidence`` as an object, times ISO 8601."""
    records = json.loads(findings.to_json(orient="records", date_format="iso"))
    for rec in records:
        if isinstance(rec.get("evidence"), str):
            with contextlib.suppress(json.JSONDecodeError):
                rec["evidence"] = json.loads(rec["evidence"])
    return records


#: The tables the report draws but never lists, written as Parquet only: the record-level
#: ones (a row per request, event or status change: a million rows at scale) and the
#: takedown curves' points and durations (a row per incident).
PARQUET_ONLY = (
    "deliveries",
    "events",
    "status_intervals",
    "takedown_km",
    "takedown_km_all",
    "takedown_durations",
)


def write_tables(tables: Mapping[str, pd.DataFrame], folder: Path) -> list[Path]:
    """Every table as Parquet, and as CSV (through the one CSV writer,
    :func:`audit.safe.write_csv`) unless it is one of :data:`PARQUET_ONLY`; the folder is
    made first if need be. Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)

    def one(name: str, frame: pd.DataFrame) -> list[Path]:
        path = folder / f"{name}.parquet"
        try:
            frame.to_parquet(path, index=False)
        except OSError as e:  # Arrow's error names no file (a full disk: "[errno 28]")
            why = e.strerror or str(e).splitlines()[0]
            raise OutputError(f"{path}: cannot write ({why})") from None
        if name in PARQUET_ONLY:
            return [path]
        write_csv(frame, folder / f"{name}.csv")
        return [path, folder / f"{name}.csv"]

    # Two at a time, as ``Analysis.write`` does (Parquet encoding releases the GIL), unless
    # AUDIT_JOBS=1; the costliest first, so that the two end together.
    sizes = {name: (frame.size, name not in PARQUET_ONLY) for name, frame in tables.items()}
    with threads(2) as pool:
        done = {name: pool.submit(one, name, tables[name]) for name in longest_first(sizes)}
        return [path for name in tables for path in done[name].result()]


@dataclass
class RunData:
    """A run folder read back (or built in memory for an analyst notebook).

    ``tables`` are read from Parquet on first use; a missing table is an empty frame.
    """

    manifest: dict[str, Any]
    findings: pd.DataFrame
    trend: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: Frames computed from the tables and kept for the next figure (see audit.report.figures).
    derived: dict[object, object] = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The table ``name`` (``tables/<name>.parquet``), or an empty frame.

        With ``columns``, only those of them the table has: read from the file alone (a
        figure that draws three columns of a million rows does not read twenty), or taken
        from the whole table when it is already in memory. Each answer is kept, so asking
        again gives the same frame object (until the whole table is replaced).
        """
        if columns is None:
            if name not in self.tables:
                self.tables[name] = self._read(name, None)
            return self.tables[name]
        if isinstance(columns, str):  # one column named, not its letters
            columns = [columns]
        key = ("columns", name, tuple(columns))
        whole = self.tables.get(name)
        kept = self.derived.get(key)
        if not isinstance(kept, tuple) or kept[0] is not whole:  # new, or the table replaced
            if whole is not None:
                cut = whole[[c for c in columns if c in whole.columns]]
            else:
                cut = self._read(name, columns)
            kept = self.derived[key] = (whole, cut)
        return kept[1]

    def _read(self, name: str, columns: Sequence[str] | None) -> pd.DataFrame:
        if self.run_dir is None:
            return pd.DataFrame()
        path = self.run_dir / "tables" / f"{name}.parquet"
        if not path.is_file():
            return pd.DataFrame()
        if columns is not None:
            present = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in present]
        return pd.read_parquet(path, columns=columns)


def _read_json(path: Path, default: object) -> Any:  # JSON: whatever the file holds
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: unreadable ({type(e).__name__})") from None


def open_run(run_dir: str | os.PathLike[str] | None) -> RunData:
    """Read a run folder written by ``audit report`` (the notebook's one data parameter).

    Raises
    ------
    ParameterError
        ``run_dir`` is not given or holds no ``manifest.json``.
    """
    if run_dir is None:
        raise ParameterError("run_dir: give a run folder written by `audit report`")
    folder = Path(run_dir)
    if not (folder / "manifest.json").is_file():
        raise ParameterError(f"run_dir: {folder} holds no manifest.json")
    manifest = _read_json(folder / "manifest.json", {})
    records = _read_json(folder / "findings.json", [])
    findings = pd.DataFrame(records)
    if "evidence" in findings.columns:
        findings["evidence"] = findings["evidence"].map(
            lambda e: json.dumps(e, sort_keys=True) if isinstance(e, dict | list) else e
        )
    trend = _read_json(folder / "trend.json", {})
    return RunData(manifest, findings, trend, folder)


def versions() -> dict[str, str]:
    """The toolkit's and its main libraries' versions, and Python's."""
    out = {"python": platform.python_version()}
    for name in ("audit", "pandas", "numpy", "pyarrow", "matplotlib", "papermill", "nbconvert"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "unknown"
    return out


def finding_counts(findings: pd.DataFrame) -> dict[str, dict[str, int]]:
    """How many findings have each status, and each severity among the failing or erring."""
    out: dict[str, dict[str, int]] = {"status": {}, "severity": {}}
    for rec in findings[["status", "severity"]].to_dict("records") if len(findings) else []:
        out["status"][rec["status"]] = out["status"].get(rec["status"], 0) + 1
        if rec["status"] in ("fail", "error"):
            out["severity"][rec["severity"]] = out["severity"].get(rec["severity"], 0) + 1
    return out


def write_run(
    tmp: Path,
    period: Period,
    checked: ReportParams,
    computed: Computed,
    *,
    code: int,
    nb_path: Path,
    started: datetime,
    skipped_inputs: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """Write a run folder (under the run lock) into ``tmp`` (``<period>/.tmp-<run id>``):
    findings, trend, every table, and the manifest, last; return the manifest.

    ``code`` is the run's exit code, ``nb_path`` the notebook to render, ``started`` when the
    run began, ``skipped_inputs`` the input paths given but not read (``path``, ``reason``).
    """
    root, run_id = tmp.parents[1], tmp.name.removeprefix(".tmp-")
    write_csv(computed.findings, tmp / "findings.csv")
    write_json(tmp / "findings.json", findings_records(computed.findings))
    write_json(
        tmp / "findings.ocsf.json",  # the same findings for SIEMs (OCSF Compliance Finding)
        ocsf_findings(
            computed.findings,
            run_id=run_id,
            period=period,
            as_of=checked.as_of,
            product_version=versions()["audit"],
        ),
    )
    trend = trend_for(root, period, computed.findings)
    write_json(tmp / "trend.json", trend)
    write_tables(computed.tables, tmp / "tables")
    manifest = {
        "run_id": run_id,
        "title": "Webhook delivery compliance report",
        "period": period.as_dict(),
        "as_of": checked.as_of.isoformat(),
        "client_id": checked.client_id,
        "parameters": checked.as_dict(),
        "versions": versions(),
        "inputs": json.loads(computed.tables["inputs"].to_json(orient="records")),
        "coverage": computed.coverage,
        "skipped_inputs": [dict(s) for s in skipped_inputs],
        "snapshots": computed.snapshots or {"newest_taken_at": None},
        "notebook": {"path": str(nb_path), "sha256": _sha256(nb_path)},
        "started": started.isoformat(),
        "findings": finding_counts(computed.findings),
        "trend": {
            "previous_period": (trend["previous"] or {}).get("period"),
            "previous_run": (trend["previous"] or {}).get("run_id"),
            **{k: len(trend[k]) for k in TREND_KINDS},
        },
        "notes": computed.notes,
        "exit_status": code,
        "rendering": {"status": "pending"},
        "python": platform.python_version(),
    }
    write_json(tmp / "manifest.json", manifest)
    return manifest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
