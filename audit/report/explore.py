"""The report's computation in memory, as a :class:`RunData` for :mod:`audit.report.views`.

Notebooks and scripts use :func:`audit.workbench.open` (``audit.open``: DataFrames, drill-down,
figures; ``docs/analysis.md``); this stays for code that shows the report's own views of a
period in memory (the report's tests compare them with a run folder).

``explore(logs=None)`` opens the built-in demo data, so a notebook runs straight away in
JupyterLab. Without a period, the period is read from the data: the months of the evidence
store, or the months the logs' receipt times span. Nothing is written; the scheduled report is
``audit report`` (docs/report.md).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from audit.demo import simulate
from audit.errors import InputError, ParameterError
from audit.ingest.scan import open_store
from audit.ingest.store import ingest
from audit.report.compute import compute
from audit.report.inputs import Inputs, load_inputs
from audit.report.params import Period, ReportParams, check_params
from audit.report.rundir import RunData, findings_records, versions
from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = ["demo_inputs", "explore", "months_period"]

#: A stand-in period for checking parameters before the period is read from the data.
_ANY_PERIOD = Period(
    "any", pd.Timestamp("2000-01-01", tz="UTC"), pd.Timestamp("2100-01-01", tz="UTC")
)


class _Load(NamedTuple):
    """The paths :func:`explore` loads from."""

    logs: list[str | os.PathLike[str]]
    secrets: str
    snapshots: list[str | os.PathLike[str]]
    mutes: str | None
    store: str | None


def _load(
    load: _Load, params: ReportParams, period: Period | None, as_of: pd.Timestamp | None
) -> Inputs:
    return load_inputs(
        load.logs,
        secrets_path=load.secrets,
        snapshots=load.snapshots,
        mutes_path=load.mutes,
        header_prefix=params.header_prefix,
        client_id=params.client_id,
        store=load.store,
        start=None if period is None else period.start,
        end=None if period is None else period.end,
        as_of=as_of,
    )


def _own_folder(path: Path) -> bool:
    """Whether ``path`` is a real folder (not a link) of this user."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def demo_inputs(seed: int = 7) -> dict[str, object]:
    """Parameters pointing at the built-in demo data (generated once into a temporary folder).

    The folder is this user's (``audit-demo-seed<seed>-<uid>``): one that is a link, or that
    another user made first (a shared temporary directory), is never read; the demo is then
    generated into a fresh private folder instead. It is made whole in a private folder (mode
    0700) and renamed into place, so nothing can be planted in it while it is made."""
    root = Path(tempfile.gettempdir()) / f"audit-demo-seed{seed}-{os.getuid()}"
    if not _own_folder(root) and (root.exists() or root.is_symlink()):
        # planted or another user's: not ours to read or replace
        root = Path(tempfile.mkdtemp(prefix=f"audit-demo-seed{seed}-")) / "demo"
        simulate(root, seed=seed)
    if not (root / "truth.json").is_file():
        try:  # made whole in a private folder beside it, then renamed (audit.demo.simulate)
            simulate(root, seed=seed)
        except InputError:  # something there now: another process of ours made it first?
            if not (_own_folder(root) and (root / "truth.json").is_file()):
                root = Path(tempfile.mkdtemp(prefix=f"audit-demo-seed{seed}-")) / "demo"
                simulate(root, seed=seed)
    truth = json.loads((root / "truth.json").read_text())
    return {
        "logs": [str(root / "captures")],
        "secrets_path": str(root / "secrets.json"),
        "snapshots": [str(root / "snapshots")],
        "period_start": truth["period"]["start"],
        "period_end": truth["period"]["end"],
    }


def _day(name: str, value: object) -> pd.Timestamp:
    if value is None or value == "":
        raise ParameterError(f"{name} is missing")
    try:
        ts = pd.Timestamp(str(value))
    except (ValueError, TypeError, OverflowError):
        raise ParameterError(f"{name} {value!r} is not an ISO 8601 date") from None
    if pd.isna(ts):
        raise ParameterError(f"{name} is missing")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def months_period(first: pd.Timestamp, last: pd.Timestamp) -> Period:
    """The whole months from ``first``'s to ``last``'s (UTC), labelled as ``audit report``
    labels a month (``2026-10``) or, over several, as a range of days (end excluded).

    >>> t = pd.Timestamp
    >>> months_period(t("2026-10-03T12:00Z"), t("2026-10-29T00:00Z")).label
    '2026-10'
    >>> months_period(t("2026-10-03T12:00Z"), t("2026-12-01T00:00Z")).label
    '2026-10-01..2027-01-01'
    """
    start = first.tz_convert("UTC").tz_localize(None).to_period("M").to_timestamp()
    end = (last.tz_convert("UTC").tz_localize(None).to_period("M") + 1).to_timestamp()
    start, end = start.tz_localize("UTC"), end.tz_localize("UTC")
    one = end == start + pd.offsets.MonthBegin(1)
    return Period(f"{start:%Y-%m}" if one else f"{start:%Y-%m-%d}..{end:%Y-%m-%d}", start, end)


def _store_period(store: object) -> Period:
    """The months the store holds deliveries of (its parts' ``month=`` folders)."""
    months = sorted(
        {
            p.parent.name.removeprefix("month=")
            for p in open_store(str(store)).parts(check=False)
            if p.parent.name.startswith("month=") and p.parent.name != "month=none"
        }
    )
    if not months:
        raise ParameterError(
            f"{store}: the store holds no delivery with a receipt time to read the period "
            "from; give period_start and period_end"
        )
    first = pd.Timestamp(f"{months[0]}-01", tz="UTC")
    return months_period(first, pd.Timestamp(f"{months[-1]}-01", tz="UTC"))


def _data_period(inputs: Inputs) -> Period:
    """The months the loaded deliveries' receipt times span."""
    d = inputs.deliveries
    times = d["received_at"].dropna() if d is not None and "received_at" in d else pd.Series()
    if times.empty:
        raise ParameterError(
            "the logs hold no delivery with a receipt time to read the period from; give "
            "period_start and period_end"
        )
    return months_period(pd.Timestamp(times.min()), pd.Timestamp(times.max()))


def _path(name: str, value: object, what: str) -> str:
    """A required path parameter, named plainly when it is missing or not a path."""
    if value is None or value == "":
        raise ParameterError(f"{name} is missing: {what}")
    if not isinstance(value, str | os.PathLike):
        raise ParameterError(f"{name} must be a path, not {type(value).__name__}")
    return os.fspath(value)


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
    With ``store`` (an evidence store folder), ``logs`` if given are ingested into it first.
    ``secrets_path`` is needed (the logs are verified with it, and the controls judge secret
    age from it).

    Without ``period_start`` and ``period_end``, the period is read from the data: the whole
    months the store holds deliveries of (after ingesting ``logs``), or, without a store, the
    whole months the logs' receipt times span. Giving one of the two without the other is a
    :class:`~audit.errors.ParameterError`, as is a missing ``secrets_path``: one line naming
    the parameter.
    """
    if logs is None and store is None:
        demo = demo_inputs()
        logs, secrets_path, snapshots = demo["logs"], demo["secrets_path"], demo["snapshots"]
        period_start = period_start or demo["period_start"]
        period_end = period_end or demo["period_end"]
    secrets = _path("secrets_path", secrets_path, "the secrets file the logs are verified with")
    given: dict[str, object] = {
        "as_of": as_of,
        "client_id": client_id,
        "clock_start": clock_start,
        "header_prefix": header_prefix,
        "thresholds": thresholds or {},
    }
    load = _Load(
        logs=_paths(logs, "logs"),
        secrets=secrets,
        snapshots=_paths(snapshots, "snapshots"),
        mutes=_path("mutes_path", mutes_path, "") if mutes_path else None,
        store=None if store is None else _path("store", store, "an evidence store folder"),
    )
    inputs: Inputs | None = None
    if period_start is None and period_end is None:  # read from the data
        if load.store is not None:
            if load.logs:  # ingested first: the period covers them too
                prefix = check_params(given, _ANY_PERIOD).header_prefix
                ingest(load.logs, secrets, load.store, header_prefix=prefix)
                load = load._replace(logs=[])
            period = _store_period(load.store)
        else:
            early = check_params(given, _ANY_PERIOD)
            upto = early.as_of if as_of is not None else None
            inputs = _load(load, early, None, upto)
            period = _data_period(inputs)
    else:
        start, end = _day("period_start", period_start), _day("period_end", period_end)
        if end <= start:
            raise ParameterError("period_end must be after period_start")
        period = Period(f"{start:%Y-%m-%d}..{end:%Y-%m-%d}", start, end)
    params = check_params(given, period)
    if inputs is None:
        inputs = _load(load, params, period, params.as_of)
    computed = compute(inputs, params, period)
    start, end = period.start, period.end
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
