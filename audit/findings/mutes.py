"""Mutes: accepted, temporary exceptions that turn matching findings into ``muted``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from audit.errors import InputError, SchemaError
from audit.findings.catalogue import load_catalogue
from audit.findings.controls.base import evidence_json
from audit.redaction import refuse_known_secrets
from audit.timeutil import parse_iso_ns

__all__ = ["MUTE_COLUMNS", "apply_mutes", "read_mutes"]

MUTE_COLUMNS = ("check_id", "resource", "reason", "expires")


def read_mutes(path: str | Path) -> pd.DataFrame:
    """Read a mutes file: a JSON list of ``{check_id, resource, reason, expires}``.

    ``resource`` may be ``"*"`` (every resource of the control). ``expires`` is an ISO 8601
    date or time; a date means midnight UTC at its start, a time without offset is UTC.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`MUTE_COLUMNS`; ``expires`` is a UTC timestamp.

    Raises
    ------
    InputError
        One line naming the file and the entry: unreadable, not JSON, not a list of objects,
        a missing or unknown field, an empty string, an unknown check id, a bad ``expires``.

    Examples
    --------
    >>> mutes = read_mutes("mutes.json")  # doctest: +SKIP
    >>> mutes.loc[0, "expires"]  # doctest: +SKIP
    Timestamp('2026-12-31 00:00:00+0000', tz='UTC')
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        refuse_known_secrets(p, text)  # a secret never belongs here (issue 9)
        raw = json.loads(text)
    except FileNotFoundError:
        raise InputError(f"{p}: mutes file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the mutes file ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    if not isinstance(raw, list):
        raise InputError(f"{p}: the mutes file must be a JSON list of objects")
    known = load_catalogue()
    rows = []
    for i, item in enumerate(raw, 1):
        at = f"{p}: mute {i}"
        if not isinstance(item, dict):
            raise InputError(f"{at}: must be an object")
        if set(item) != set(MUTE_COLUMNS):
            missing = sorted(set(MUTE_COLUMNS) - set(item))
            extra = sorted(set(item) - set(MUTE_COLUMNS))
            raise InputError(f"{at}: missing field(s) {missing}, unknown field(s) {extra}")
        for key in MUTE_COLUMNS:
            if not isinstance(item[key], str) or not item[key].strip():
                raise InputError(f"{at}: {key!r} must be a non-empty string")
        if item["check_id"] not in known:
            raise InputError(f"{at}: unknown check_id {item['check_id']!r}")
        try:
            ns, _ = parse_iso_ns(item["expires"])
        except ValueError:
            raise InputError(f"{at}: 'expires' is not an ISO 8601 date or time") from None
        rows.append(
            {
                "check_id": item["check_id"],
                "resource": item["resource"],
                "reason": item["reason"],
                "expires": pd.Timestamp(ns, tz="UTC"),
            }
        )
    frame = pd.DataFrame(rows, columns=list(MUTE_COLUMNS))
    for col in MUTE_COLUMNS[:3]:
        frame[col] = frame[col].astype("str")
    frame["expires"] = pd.to_datetime(frame["expires"], utc=True).astype("datetime64[ns, UTC]")
    return frame


def apply_mutes(
    findings: pd.DataFrame, mutes: pd.DataFrame, *, as_of: pd.Timestamp
) -> pd.DataFrame:
    """Mute the findings that an unexpired mute matches; note the expired ones.

    A mute matches a finding with the same ``check_id`` and the same ``resource`` (or ``"*"``).
    It is active while ``as_of < expires``. An active mute turns the status into ``muted`` and
    adds ``{"muted": {"original_status", "reason", "expires"}}`` to the evidence; when only
    expired mutes match, ``{"mute_expired": {"reason", "expires"}}`` is added and the status
    kept. ``error`` rows are never muted: a broken control must not hide. When several mutes
    match, one naming the resource wins over ``"*"``, then the latest expiry.

    Examples
    --------
    >>> f = pd.DataFrame({"check_id": ["SUB-04"], "resource": ["wh_1"], "status": ["fail"],
    ...                   "evidence": ["{}"]})
    >>> m = pd.DataFrame({"check_id": ["SUB-04"], "resource": ["*"], "reason": ["retiring"],
    ...                   "expires": [pd.Timestamp("2026-12-31", tz="UTC")]})
    >>> out = apply_mutes(f, m, as_of=pd.Timestamp("2026-11-01", tz="UTC"))
    >>> out.loc[0, "status"], json.loads(out.loc[0, "evidence"])["muted"]["original_status"]
    ('muted', 'fail')
    """
    missing = [c for c in MUTE_COLUMNS if c not in mutes.columns]
    if missing:
        raise SchemaError(f"mutes lacks column(s): {', '.join(missing)}; use read_mutes()")
    if findings.empty or mutes.empty:
        return findings
    expires = pd.to_datetime(mutes["expires"], utc=True)
    table = mutes.assign(expires=expires, _exact=mutes["resource"] != "*")
    table = table.sort_values(["_exact", "expires"], ascending=False, kind="stable")
    out = findings.copy()
    for i, row in out.iterrows():
        if row["status"] == "error":
            continue
        match = table[
            (table["check_id"] == row["check_id"])
            & ((table["resource"] == row["resource"]) | (table["resource"] == "*"))
        ]
        if match.empty:
            continue
        evidence = json.loads(row["evidence"])
        active = match[match["expires"] > as_of]
        if len(active):
            m = active.iloc[0]
            evidence["muted"] = {
                "original_status": row["status"],
                "reason": m["reason"],
                "expires": m["expires"].isoformat(),
            }
            out.at[i, "status"] = "muted"
        else:
            m = match.sort_values("expires", ascending=False, kind="stable").iloc[0]
            evidence["mute_expired"] = {"reason": m["reason"], "expires": m["expires"].isoformat()}
        out.at[i, "evidence"] = evidence_json(evidence)
    return out
