"""Shared builders: small capture records and files, written the way a receiver stores them, and
frames of the declared tables built row by row, by column name (``audit.tables``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from audit.tables import DELIVERIES, Table


def rows_frame(table: Table, rows: list[dict]) -> pd.DataFrame:
    """Rows given by column name as a frame of ``table``: every declared column, in order, in
    its declared dtype. A name the table does not declare is a KeyError, never a silent extra
    column, and no column can shift: nothing here is positional."""
    return table.frame([table.row(**r) for r in rows])


def deliveries_frame(rows: list[dict]) -> pd.DataFrame:
    """Verified deliveries (:data:`audit.tables.DELIVERIES`) from rows by column name; ``line``
    is numbered from 1 when not given."""
    rows = [{"line": i, **r} for i, r in enumerate(rows, 1)]
    return rows_frame(DELIVERIES, rows)


def capture(
    body: str | None,
    *,
    received_at: object = "2026-10-01T00:00:05Z",
    signature: str | None = None,
    timestamp: str | None = "1790812800",
    subscription_id: str | None = "wh_1",
    headers: object = None,
    **extra: object,
) -> dict:
    """One capture record. ``headers`` overrides the default header object when given."""
    if headers is None:
        headers = {"Content-Type": "application/json"}
        if signature is not None:
            headers["X-PhishFort-Signature"] = signature
        if timestamp is not None:
            headers["X-PhishFort-Timestamp"] = timestamp
        headers["X-PhishFort-Delivery-Id"] = "dlv_1"
    rec: dict = {"received_at": received_at, "headers": headers}
    if body is not None:
        rec["body"] = body
    if subscription_id is not None:
        rec["subscription_id"] = subscription_id
    rec.update(extra)
    return rec


def write_jsonl(path: Path, records: list[object]) -> Path:
    """Write records one per line; a str record is written as is (for broken lines)."""
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False))
            f.write("\n")
    return path


def write_secrets(path: Path, data: dict) -> Path:
    """A secrets file with mode 0600, as it should be (others get a SecretsWarning)."""
    path.write_text(json.dumps(data), encoding="utf-8")
    path.chmod(0o600)
    return path


def demo_report_inputs(demo: dict, **store):
    """The demo month's (period, checked parameters, loaded inputs), loaded as `audit report`
    loads them (``demo``: :func:`audit.report.explore.demo_inputs`); ``store=DIR`` reads them
    through an evidence store (the incident fold then runs aside, as in a report)."""
    from audit.report.inputs import load_inputs
    from audit.report.params import check_params, parse_period

    period = parse_period(demo["period_start"][:7])
    params = check_params({}, period)
    inputs = load_inputs(
        demo["logs"],
        secrets_path=demo["secrets_path"],
        snapshots=demo["snapshots"],
        header_prefix=params.header_prefix,
        start=period.start,
        end=period.end,
        as_of=params.as_of,
        clock_start=params.clock_start,
        **store,
    )
    return period, params, inputs
