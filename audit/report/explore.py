"""For the analyst notebooks: the report's computation in memory, viewed with the same views.

``explore(logs=None)`` opens the built-in demo data, so a notebook runs straight away in
JupyterLab. Nothing is written; the scheduled report is ``audit report`` (docs/report.md).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from audit.demo import simulate
from audit.errors import ParameterError
from audit.report.compute import compute
from audit.report.inputs import load_inputs
from audit.report.params import Period, check_params
from audit.report.rundir import RunData, findings_records, versions
from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = ["demo_inputs", "explore"]


def demo_inputs(seed: int = 7) -> dict[str, object]:
    """Parameters pointing at the built-in demo data (generated once into a temporary folder)."""
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


def _day(name: str, value: object) -> pd.Timestamp:
    try:
        ts = pd.Timestamp(str(value))
    except (ValueError, TypeError, OverflowError):
        raise ParameterError(f"{name} {value!r} is not an ISO 8601 date") from None
    if pd.isna(ts):
        raise ParameterError(f"{name} is missing")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _paths(value: object, name: str) -> list[str | os.PathLike[str]]:
    """A notebook's path parameter (one path, a list of them, or none) as a list."""
    if isinstance(value, str | os.PathLike):
        return [value]
    if not value:
        return []
    if not isinstance(value, Iterable):
        raise TypeError(f"{name}: a path or a list of paths, not {type(value).__name__}")
    return list(value)


def explore(
    *,
    logs: object = None,
    secrets_path: object = None,
    snapshots: object = None,
    period_start: object = None,
    period_end: object = None,
    as_of: object = None,
    client_id: object = None,
    thresholds: object = None,
    mutes_path: object = None,
    header_prefix: object = DEFAULT_HEADER_PREFIX,
    clock_start: object = "created",
    store: object = None,
) -> RunData:
    """Load, analyse and judge in memory; a :class:`RunData` for :mod:`audit.report.views`.

    With ``logs=None`` and no ``store`` the demo data is used (and its period, unless given).
    With ``store`` (an evidence store folder), ``logs`` if given are ingested into it first,
    and the period is read from the store (``secrets_path`` is still needed: the controls
    judge secret age from it).
    """
    if logs is None and store is None:
        demo = demo_inputs()
        logs, secrets_path, snapshots = demo["logs"], demo["secrets_path"], demo["snapshots"]
        period_start = period_start or demo["period_start"]
        period_end = period_end or demo["period_end"]
    start, end = _day("period_start", period_start), _day("period_end", period_end)
    if end <= start:
        raise ParameterError("period_end must be after period_start")
    period = Period(f"{start:%Y-%m-%d}..{end:%Y-%m-%d}", start, end)
    params = check_params(
        {
            "as_of": as_of,
            "client_id": client_id,
            "clock_start": clock_start,
            "header_prefix": header_prefix,
            "thresholds": thresholds or {},
        },
        period,
    )
    inputs = load_inputs(
        _paths(logs, "logs"),
        secrets_path=str(secrets_path),
        snapshots=_paths(snapshots, "snapshots"),
        mutes_path=str(mutes_path) if mutes_path else None,
        header_prefix=params.header_prefix,
        client_id=params.client_id,
        store=None if store is None else str(store),
        start=period.start,
        end=period.end,
        as_of=params.as_of,
    )
    computed = compute(inputs, params, period)
    manifest = {
        "title": "Webhook delivery analysis (exploration)",
        "run_id": "in memory",
        "period": {"label": period.label, "start": start.isoformat(), "end": end.isoformat()},
        "as_of": params.as_of.isoformat(),
        "client_id": params.client_id,
        "parameters": params.as_dict(),
        "versions": versions(),
        "inputs": json.loads(computed.tables["inputs"].to_json(orient="records")),
        "notes": computed.notes,
    }
    findings = pd.DataFrame(findings_records(computed.findings))
    if "evidence" in findings.columns:
        findings["evidence"] = findings["evidence"].map(
            lambda e: json.dumps(e, sort_keys=True) if isinstance(e, dict | list) else e
        )
    return RunData(manifest, findings, {}, None, dict(computed.tables))
