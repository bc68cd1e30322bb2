"""Mutes: accepted, temporary exceptions that turn matching findings into ``muted``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from pandas.api.typing import NaTType

from audit.errors import InputError, SchemaError
from audit.findings.catalogue import load_catalogue
from audit.findings.controls.base import evidence_json
from audit.ingest.secrets import load_json_noting_repeats, repeated_keys
from audit.paths import read_regular
from audit.redaction import refuse_known_secrets
from audit.text import NOT_TEXT, holds_lone_surrogate
from audit.timeutil import FIRST_YEAR, NS_MAX, ns_in_range, parse_iso_ns

__all__ = ["MUTE_COLUMNS", "apply_mutes", "read_mutes"]

MUTE_COLUMNS = ("check_id", "resource", "reason", "expires")


def read_mutes(path: str | Path) -> pd.DataFrame:
    """Read a mutes file: a JSON list of ``{check_id, resource, reason, expires}``.

    ``resource`` may be ``"*"`` (every resource of the control). ``expires`` is an ISO 8601
    date or time; a date means midnight UTC at its start, a time without offset is UTC. A time
    after 2262-04-11 (the last a table holds), such as ``"9999-12-31"``, never expires: its
    ``expires`` is NaT. The file must be a regular file of at most 16 MiB.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`MUTE_COLUMNS`; ``expires`` is a UTC timestamp.

    Raises
    ------
    InputError
        One line naming the file and the entry: unreadable, not a regular file, over 16 MiB,
        not JSON, nested too deeply, not a list of objects, a field named twice, a missing or
        unknown field, an empty string, an unknown check id, a bad ``expires`` (or one before
        1678).

    Examples
    --------
    >>> import tempfile
    >>> mute = {"check_id": "SIG-01", "resource": "*", "reason": "accepted until the fix",
    ...         "expires": "2026-12-31"}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder, "mutes.json")
    ...     _ = path.write_text(json.dumps([mute]))
    ...     mutes = read_mutes(path)
    >>> mutes.loc[0, "expires"]
    Timestamp('2026-12-31 00:00:00+0000', tz='UTC')
    """
    p = Path(path)
    try:  # a regular file of at most 16 MiB (never a FIFO, which would block, nor /dev/zero)
        text = read_regular(p, what="mutes file").decode("utf-8")
        refuse_known_secrets(p, text)  # a secret never belongs here (issue 9)
        raw = load_json_noting_repeats(text)  # a key named twice is refused below
    except FileNotFoundError:
        raise InputError(f"{p}: mutes file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the mutes file ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise InputError(f"{p}: JSON nested too deeply") from None
    if holds_lone_surrogate(raw):
        raise InputError(f"{p}: {NOT_TEXT}")
    if not isinstance(raw, list):
        raise InputError(f"{p}: the mutes file must be a JSON list of objects")
    known = load_catalogue()
    rows = []
    for i, item in enumerate(raw, 1):
        at = f"{p}: mute {i}"
        if not isinstance(item, dict):
            raise InputError(f"{at}: must be an object")
        if repeated := repeated_keys(item):  # JSON would keep the last silently
            shown = repr(repeated[0]) if repeated[0] in MUTE_COLUMNS else "a field"
            raise InputError(f"{at} names {shown} twice")
        if set(item) != set(MUTE_COLUMNS):
            missing = sorted(set(MUTE_COLUMNS) - set(item))
            extra = sorted(set(item) - set(MUTE_COLUMNS))
            raise InputError(f"{at}: missing field(s) {missing}, unknown field(s) {extra}")
        for key in MUTE_COLUMNS:
            if not isinstance(item[key], str) or not item[key].strip():
                raise InputError(f"{at}: {key!r} must be a non-empty string")
        if item["check_id"] not in known:
            raise InputError(f"{at}: unknown check_id {item['check_id']!r}")
        rows.append(
            {
                "check_id": item["check_id"],
                "resource": item["resource"],
                "reason": item["reason"],
                "expires": _expires(item["expires"], at),
            }
        )
    frame = pd.DataFrame(rows, columns=list(MUTE_COLUMNS))
    for col in MUTE_COLUMNS[:3]:
        frame[col] = frame[col].astype("str")
    frame["expires"] = pd.to_datetime(frame["expires"], utc=True).astype("datetime64[ns, UTC]")
    return frame


def _expires(value: str, at: str) -> pd.Timestamp | NaTType:
    """A mute's expiry: NaT (never) for a time after 2262-04-11, the last a table holds."""
    try:
        ns, _ = parse_iso_ns(value)
    except ValueError:
        raise InputError(f"{at}: 'expires' is not an ISO 8601 date or time") from None
    if ns > NS_MAX:  # "9999-12-31", the natural "never"
        return pd.NaT
    if not ns_in_range(ns):
        raise InputError(f"{at}: 'expires' is before {FIRST_YEAR}, the earliest year supported")
    return pd.Timestamp(ns, tz="UTC")


def apply_mutes(
    findings: pd.DataFrame, mutes: pd.DataFrame, *, as_of: pd.Timestamp
) -> pd.DataFrame:
    """Mute the findings that an unexpired mute matches; note the expired ones.

    A mute matches a finding with the same ``check_id`` and the same ``resource`` (or ``"*"``).
    It is active while ``as_of < expires``, or always when ``expires`` is NaT (never; the
    evidence then says ``"never"``). An active mute turns the status into ``muted`` and
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
    # NaT (never expires) sorts as the latest expiry
    table = table.sort_values(
        ["_exact", "expires"], ascending=False, kind="stable", na_position="first"
    )
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
        active = match[match["expires"].isna() | (match["expires"] > as_of)]
        if len(active):
            m = active.iloc[0]
            evidence["muted"] = {
                "original_status": row["status"],
                "reason": m["reason"],
                "expires": "never" if pd.isna(m["expires"]) else m["expires"].isoformat(),
            }
            out.at[i, "status"] = "muted"
        else:
            m = match.sort_values("expires", ascending=False, kind="stable").iloc[0]
            evidence["mute_expired"] = {"reason": m["reason"], "expires": m["expires"].isoformat()}
        out.at[i, "evidence"] = evidence_json(evidence)
    return out
