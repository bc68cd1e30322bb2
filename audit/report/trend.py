"""Trend against the previous period: new, resolved, not judged and persisting failures.

A failure of the previous run is **resolved** only when its control and resource *pass* now.
One that is now ``skip`` (nothing to judge: an empty month, no listing covering the period),
``error``, ``muted`` or absent (the resource no longer seen) is **not judged**: nothing shows
it was fixed (``not_judged`` in ``trend.json``, with ``status_now``).

The previous run is the newest *completed* run (findings written, exit status 0, 1 or 2) in the
same ``--out`` whose period, of the same kind (month, week, range), ends where this one starts.
A damaged run of that period (its manifest or findings not a regular file under the size limit,
not JSON, nested too deeply or of the wrong shape: :mod:`audit.report.index`) is skipped with a
note, and the next older good one is used. Findings are matched by their control
and resource: a finding uid also encodes its period (``audit.findings.finding_uid``), so the same
failure has a new uid every month; each side keeps its own uid in the trend.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from audit.errors import ParameterError
from audit.report.index import (
    FINDINGS_LIMIT,
    TREND_KINDS,
    RunEntry,
    check_findings,
    period_kind,
    read_history_json,
    scan_runs,
)
from audit.report.params import Period, parse_period

__all__ = ["TREND_KINDS", "Previous", "compare", "previous_run", "trend_for"]

_KEEP = ("finding_uid", "check_id", "severity", "title", "resource", "reason")


class Previous(NamedTuple):
    """The run a trend compares with: its folder, manifest and findings."""

    folder: Path
    manifest: dict
    findings: pd.DataFrame


def _same_kind_before(entry: RunEntry, period: Period) -> bool:
    """Whether the run's folder is a period of ``period``'s kind ending where it starts."""
    if period_kind(entry.label) != period_kind(period.label):
        return False
    try:
        return parse_period(entry.label).end == period.start
    except ParameterError:
        return False


def previous_run(root: Path, period: Period) -> tuple[Previous | None, list[str]]:
    """The newest completed run of the period before ``period`` (same kind: a month for a
    month) whose manifest and findings read well, and a note for each run of that period
    skipped on the way (damaged: the next older one is used)."""
    notes: list[str] = []
    found: Previous | None = None
    for entry in scan_runs(root):  # newest first; runs of unknown time last
        if not _same_kind_before(entry, period):
            continue
        name = f"run {entry.folder.name} of {entry.label}"
        if entry.state == "damaged":
            if found is None or entry.when is None:  # newer than the one used, or maybe so
                notes.append(f"{name} skipped: damaged ({entry.problem})")
            continue
        if found is not None or entry.state != "completed" or entry.manifest is None:
            continue
        try:
            records = check_findings(
                read_history_json(entry.folder / "findings.json", FINDINGS_LIMIT)
            )
        except ValueError as e:
            notes.append(f"{name} skipped: damaged (findings.json: {e})")
            continue
        found = Previous(entry.folder, entry.manifest, pd.DataFrame(records))
    return found, notes


def _failing(findings: pd.DataFrame) -> pd.DataFrame:
    if findings.empty or "status" not in findings.columns:
        return pd.DataFrame(columns=list(_KEEP))
    return findings[findings["status"] == "fail"]


def _rows(df: pd.DataFrame) -> list[dict]:
    return [{k: str(r.get(k, "")) for k in _KEEP} for r in df.to_dict("records")]


def compare(
    current: pd.DataFrame, previous: pd.DataFrame | None, previous_info: dict | None = None
) -> dict:
    """New, resolved, not judged and persisting failures (pure): a failure of ``previous``
    no longer failing is ``resolved`` when its control and resource pass now, else
    ``not_judged`` (now skip, error, muted, or absent); both carry ``status_now``.

    >>> now = pd.DataFrame({"check_id": ["A", "B", "D"], "resource": ["x", "x", "x"],
    ...                     "status": ["fail", "fail", "pass"], "finding_uid": ["1", "2", "3"]})
    >>> before = pd.DataFrame({"check_id": ["B", "C", "D"], "resource": ["x", "x", "x"],
    ...                        "status": ["fail", "fail", "fail"], "finding_uid": ["7", "8", "9"]})
    >>> t = compare(now, before, {"run_id": "r"})
    >>> [[r["check_id"] for r in t[k]] for k in ("new", "persisting", "resolved", "not_judged")]
    [['A'], ['B'], ['D'], ['C']]
    >>> t["not_judged"][0]["status_now"]
    'absent'
    """
    if previous is None:
        return {"previous": None, **{k: [] for k in TREND_KINDS}}
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
    fixed: list[dict] = []
    unjudged: list[dict] = []
    for row, key in zip(resolved_rows, key_before[resolved.index], strict=True):
        # Resolved needs a pass; skip (nothing to judge), error, muted or absent (the resource
        # is no longer seen) show nothing was fixed.
        row["status_now"] = status_now.get(key, "absent")
        (fixed if row["status_now"] == "pass" else unjudged).append(row)
    return {
        "previous": previous_info,
        "new": _rows(now[~key_now.isin(set(key_before))]),
        "resolved": fixed,
        "not_judged": unjudged,
        "persisting": persisting_rows,
    }


def trend_for(root: Path, period: Period, findings: pd.DataFrame) -> dict:
    """:func:`compare` against :func:`previous_run`; ``skipped`` lists the damaged runs of the
    previous period passed over (each a sentence saying why)."""
    previous, notes = previous_run(root, period)
    if previous is None:
        return {**compare(findings, None), "skipped": notes}
    info = {
        "run_id": previous.manifest["run_id"],
        "period": previous.manifest["period"]["label"],
        "path": f"../../{previous.folder.parent.name}/{previous.folder.name}",
    }
    return {**compare(findings, previous.findings, info), "skipped": notes}
