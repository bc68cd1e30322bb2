"""Trend against the previous period: new, resolved and persisting failures.

The previous run is the newest *completed* run (findings written, exit status 0, 1 or 2) in the
same ``--out`` whose period ends where this one starts. Findings are matched by their control
and resource: a finding uid also encodes its period (``audit.findings.finding_uid``), so the same
failure has a new uid every month; each side keeps its own uid in the trend.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from audit.report.index import scan_runs
from audit.report.params import Period

__all__ = ["compare", "previous_run"]

_KEEP = ("finding_uid", "check_id", "severity", "title", "resource", "reason")


def previous_run(root: Path, period: Period) -> tuple[Path, dict] | None:
    """The newest completed run whose period ends at ``period.start`` (or None)."""
    best = None
    for entry in scan_runs(root):
        m = entry.manifest
        if m is None or entry.state != "completed":
            continue
        try:
            end = pd.Timestamp(m["period"]["end"])
        except (KeyError, TypeError, ValueError):
            continue
        if end == period.start and (best is None or m.get("started", "") > best[1]["started"]):
            best = (entry.folder, m)
    return best


def _failing(findings: pd.DataFrame) -> pd.DataFrame:
    if findings.empty or "status" not in findings.columns:
        return pd.DataFrame(columns=list(_KEEP))
    return findings[findings["status"] == "fail"]


def _rows(df: pd.DataFrame) -> list[dict]:
    return [{k: str(r.get(k, "")) for k in _KEEP} for r in df.to_dict("records")]


def compare(
    current: pd.DataFrame, previous: pd.DataFrame | None, previous_info: dict | None = None
) -> dict:
    """New, resolved and persisting failures (pure).

    >>> now = pd.DataFrame({"check_id": ["A", "B"], "resource": ["x", "x"],
    ...                     "status": ["fail", "fail"], "finding_uid": ["1", "2"]})
    >>> before = pd.DataFrame({"check_id": ["B", "C"], "resource": ["x", "x"],
    ...                        "status": ["fail", "fail"], "finding_uid": ["8", "9"]})
    >>> t = compare(now, before, {"run_id": "r"})
    >>> [[r["check_id"] for r in t[k]] for k in ("new", "persisting", "resolved")]
    [['A'], ['B'], ['C']]
    >>> t["resolved"][0]["status_now"]
    'absent'
    """
    if previous is None:
        return {"previous": None, "new": [], "resolved": [], "persisting": []}
    now, before = _failing(current), _failing(previous)
    key_now = now["check_id"].astype(str) + "\x1f" + now["resource"].astype(str)
    key_before = before["check_id"].astype(str) + "\x1f" + before["resource"].astype(str)
    persisting = now[key_now.isin(set(key_before))].copy()
    uid_before = dict(zip(key_before, before["finding_uid"].astype(str), strict=True))
    persisting_rows = _rows(persisting)
    for row, key in zip(persisting_rows, key_now[key_now.isin(set(key_before))], strict=True):
        row["previous_uid"] = uid_before[key]
    resolved = before[~key_before.isin(set(key_now))]
    resolved_rows = _rows(resolved)
    status_now: dict[str, str] = {}
    if len(current) and {"check_id", "resource", "status"} <= set(current.columns):
        keys = current["check_id"].astype(str) + "\x1f" + current["resource"].astype(str)
        status_now = dict(zip(keys, current["status"].astype(str), strict=True))
    for row, key in zip(resolved_rows, key_before[resolved.index], strict=True):
        # "resolved" only says the failure is gone: now pass, or skip (nothing to judge), or
        # muted, or absent (the resource is no longer seen).
        row["status_now"] = status_now.get(key, "absent")
    return {
        "previous": previous_info,
        "new": _rows(now[~key_now.isin(set(key_before))]),
        "resolved": resolved_rows,
        "persisting": persisting_rows,
    }


def trend_for(root: Path, period: Period, findings: pd.DataFrame) -> dict:
    """:func:`compare` against :func:`previous_run` (reads the previous run's findings)."""
    found = previous_run(root, period)
    if found is None:
        return compare(findings, None)
    folder, manifest = found
    try:
        before = pd.DataFrame(json.loads((folder / "findings.json").read_text("utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return compare(findings, None)
    info = {
        "run_id": manifest.get("run_id"),
        "period": manifest.get("period", {}).get("label"),
        "path": f"../../{folder.parent.name}/{folder.name}",
    }
    return compare(findings, before, info)
