"""Compliance controls -> findings: the runner and a summary.

The catalogue (``audit/findings/controls.json``: id, title, severity, rationale, remediation,
parameters with defaults and ranges) is documented in ``docs/controls.md``. Each control is a
small function of a :class:`~audit.findings.controls.base.Scope` (the analysis frames cut to
the period), found by its name in its family module
(:data:`audit.findings.controls.CONTROLS`); it returns
:class:`~audit.findings.controls.base.Outcome` s that :func:`run_controls` turns into finding
rows (:data:`FINDING_COLUMNS`). A control that raises becomes an ``error`` row and the others
still run. Mutes (:func:`read_mutes`) turn matching rows into ``muted`` until they expire.

Pure: no wall clock (mute expiry is compared with ``analysis.as_of``); only
:func:`load_catalogue` and :func:`read_mutes` read files.
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

import pandas as pd

from audit.analysis.analyze import Analysis
from audit.errors import ParameterError
from audit.findings.catalogue import SEVERITIES, Control, load_catalogue, resolve_params
from audit.findings.controls import CONTROLS, ControlFunction
from audit.findings.controls.base import Outcome, Scope, evidence_json
from audit.findings.mutes import apply_mutes
from audit.tables import FINDINGS

__all__ = ["FINDING_COLUMNS", "STATUSES", "finding_uid", "run_controls", "summarise"]

#: Every status of a finding.
STATUSES = ("pass", "fail", "info", "skip", "error", "muted")
#: Columns of the findings frame, in order.
FINDING_COLUMNS = tuple(FINDINGS.names)

_OUTCOME_STATUSES = ("pass", "fail", "info", "skip")
_ERROR_RESOURCE = "(control)"


def _select(catalogue: Mapping[str, Control], only: Iterable[str] | None) -> list[str]:
    if only is None:
        return list(catalogue)
    wanted = [only] if isinstance(only, str) else list(only)
    unknown = [c for c in wanted if c not in catalogue]
    if unknown:
        raise ParameterError(
            f"unknown control id(s) {', '.join(map(repr, unknown))}; known: {', '.join(catalogue)}"
        )
    return [c for c in catalogue if c in wanted]


def _period(start: object, end: object) -> tuple[pd.Timestamp, pd.Timestamp]:
    out = []
    for name, value in (("period_start", start), ("period_end", end)):
        try:
            ts = pd.Timestamp(value)  # type: ignore[arg-type]  # any object: TypeError, below
        except (TypeError, ValueError):
            raise ParameterError(f"{name} {value!r} is not a timestamp") from None
        if pd.isna(ts):
            raise ParameterError(f"{name} is missing")
        if ts.tzinfo is None:
            raise ParameterError(f"{name} {ts.isoformat()} has no UTC offset")
        out.append(ts.tz_convert("UTC"))
    if out[1] <= out[0]:
        raise ParameterError("period_end must be after period_start")
    return out[0], out[1]


# --------------------------------------------------------------------------------------------
# Finding rows
# --------------------------------------------------------------------------------------------


def finding_uid(check_id: str, resource: str, start: pd.Timestamp, end: pd.Timestamp) -> str:
    """A finding's stable id: 16 hex digits of sha256 of ``check|resource|start|end``.

    >>> t = pd.Timestamp("2026-10-01", tz="UTC")
    >>> finding_uid("SIG-01", "all requests", t, t + pd.Timedelta(days=31))
    '5793585fd741d97a'
    """
    text = f"{check_id}|{resource}|{start.isoformat()}|{end.isoformat()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _error(exc: Exception) -> Outcome:
    message = (str(exc).splitlines() or [""])[0][:300]
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{PurePath(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}"
    reason = f"The control raised {type(exc).__name__}: {message}".rstrip(": ")
    evidence = {"exception": type(exc).__name__, "message": message, "where": where}
    return Outcome("error", reason, _ERROR_RESOURCE, evidence)


def _checked(o: object) -> Outcome:
    """``o`` if it is an :class:`Outcome` of a known status (a control is anyone's code)."""
    if not isinstance(o, Outcome) or o.status not in _OUTCOME_STATUSES:
        raise ValueError(f"the control returned an invalid outcome {o!r:.80}")
    return o


def _run_one(function: ControlFunction | None, scope: Scope) -> list[Outcome]:
    try:
        if function is None:
            raise NotImplementedError("no implementation is registered for this id")
        result = function(scope)
        returned = [result] if isinstance(result, Outcome) else list(result)
        if not returned:
            raise ValueError("the control returned no outcome")
        outcomes = [_checked(o) for o in returned]
        if len({o.resource for o in outcomes}) < len(outcomes):
            raise ValueError("the control returned two outcomes for one resource")
        return outcomes
    except Exception as exc:  # a broken control becomes an error row; the others still run
        return [_error(exc)]


def run_controls(
    analysis: Analysis,
    *,
    period_start: pd.Timestamp,
    period_end: pd.Timestamp,
    params: Mapping[str, float] | None = None,
    secrets_age: Mapping[str, int | None] | None = None,
    mutes: pd.DataFrame | None = None,
    only: Iterable[str] | None = None,
    secrets_file: str | None = None,
) -> pd.DataFrame:
    """Run the catalogue's controls over an analysis and return the findings (pure).

    Parameters
    ----------
    analysis
        From :func:`audit.analysis.analyze.analyze` or :func:`audit.analysis.analyze.run_analyses`.
    period_start, period_end
        The period judged, ``[start, end)``, timezone-aware. Deliveries count when received in
        it, events when first received in it, incidents when created in it (TKD-03/04 also
        count incidents still open at ``as_of``), snapshots when fetched in it (else the
        latest one before it). See ``docs/controls.md``.
    params
        Overrides of the catalogue's parameter defaults, by name (e.g. ``{"ttt_median_h": 12}``).
    secrets_age
        Each subscription's newest secret's ``valid_from`` in ns since the epoch, None for
        "since forever" (:meth:`audit.ingest.secrets.SecretStore.latest_valid_from`). Without it,
        SIG-04 skips. Never secret values.
    mutes
        A frame from :func:`read_mutes`; expiry is compared with ``analysis.as_of``.
    only
        Run only these control ids.
    secrets_file
        The secrets file's name as given (never its contents): the reason of SIG-01 and
        SIG-02 names it when most requests of a subscription fail verification with one
        reason (:func:`audit.analysis.coverage.verification_coverage`).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`FINDING_COLUMNS`; ``evidence`` is a JSON string with sorted keys,
        ``period_start``/``period_end`` are UTC timestamps. Ordered by severity (critical
        first), then ``check_id``, then ``resource``.

    Raises
    ------
    ParameterError
        An unknown parameter name or control id, a parameter value that is not a number in its
        range, or a period that is naive or empty.

    Examples
    --------
    A week of the built-in demo data (:func:`audit.demo.simulate.simulate`), which plants
    faults:

    >>> import tempfile, warnings
    >>> from pathlib import Path
    >>> from audit.analysis.analyze import analyze
    >>> from audit.demo.simulate import simulate
    >>> with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
    ...     demo = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     analysis = analyze(demo.captures, demo.secrets)
    >>> findings = run_controls(analysis, period_start=pd.Timestamp("2026-10-01", tz="UTC"),
    ...                         period_end=pd.Timestamp("2026-10-08", tz="UTC"))
    >>> findings["status"].value_counts().to_dict()
    {'fail': 10, 'skip': 7, 'pass': 4, 'info': 1}
    >>> findings.loc[findings["status"] == "fail", "check_id"].tolist()[:3]
    ['DLV-03', 'SIG-01', 'CAP-01']
    """
    start, end = _period(period_start, period_end)
    catalogue = load_catalogue()
    values = resolve_params(catalogue, params)
    chosen = _select(catalogue, only)
    scope = Scope(analysis, start, end, values, secrets_age, secrets_file)
    rows = []
    for cid in chosen:
        control = catalogue[cid]
        for o in _run_one(CONTROLS.get(cid), scope):
            rows.append(
                {
                    "finding_uid": finding_uid(cid, o.resource, start, end),
                    "check_id": cid,
                    "title": control.title,
                    "severity": control.severity,
                    "status": o.status,
                    "reason": o.reason,
                    "resource": o.resource,
                    "evidence": evidence_json(o.evidence),
                    "remediation": control.remediation,
                    "period_start": start,
                    "period_end": end,
                    "spec_ref": control.spec_ref,
                    "docs_ref": control.docs_ref,
                }
            )
    findings = _frame(rows)
    if mutes is not None:
        findings = apply_mutes(findings, mutes, as_of=analysis.as_of)
    return findings


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    for col in FINDING_COLUMNS:
        if col.startswith("period_"):
            frame[col] = pd.to_datetime(frame[col], utc=True).astype("datetime64[ns, UTC]")
        else:
            frame[col] = frame[col].astype("str")
    rank = frame["severity"].map({s: i for i, s in enumerate(SEVERITIES)})
    order = pd.DataFrame({"r": rank, "c": frame["check_id"], "s": frame["resource"]})
    ranked = order.sort_values(["r", "c", "s"], kind="stable").index
    return frame.loc[ranked].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summarise(findings: pd.DataFrame) -> pd.DataFrame:
    """Counts of findings by severity (rows) and status (columns), with totals.

    Returns
    -------
    pandas.DataFrame
        Column ``severity`` (each of :data:`SEVERITIES`, then ``total``), one int64 column per
        status of :data:`STATUSES`, and ``total``. Every severity and status is present, with 0
        when none occurred.

    Examples
    --------
    >>> f = pd.DataFrame({"severity": ["high", "high", "info"], "status": ["fail", "pass", "info"]})
    >>> s = summarise(f).set_index("severity")
    >>> int(s.loc["high", "fail"]), int(s.loc["total", "total"])
    (1, 3)
    """
    table = pd.crosstab(findings["severity"], findings["status"])
    table = table.reindex(index=list(SEVERITIES), columns=list(STATUSES), fill_value=0)
    table = table.fillna(0).astype("int64")
    table.loc["total"] = table.sum()
    table["total"] = table.sum(axis=1)
    table.index.name = "severity"
    table.columns.name = None
    return table.reset_index()
