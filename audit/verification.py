"""The signature audit as one call: load captures, read secrets, verify every record."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from audit.load import load_captures
from audit.secrets import read_secrets
from audit.signatures import VERDICTS, verify_frame
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX

__all__ = ["VERDICT_COLUMNS", "SignatureAudit", "audit_signatures", "verdict_counts"]

#: Columns of ``verdicts.csv``, in order.
VERDICT_COLUMNS = [
    "source",
    "line",
    "received_at",
    "delivery_id",
    "event_id",
    "event",
    "incident_id",
    "subscription_id",
    "verdict",
    "hmac_ok",
    "skew_s",
    "matched_secret",
    "response_status",
    "response_ms",
    "detail",
]


@dataclass(frozen=True)
class SignatureAudit:
    """Verified deliveries plus what was read to produce them."""

    deliveries: pd.DataFrame
    inputs: pd.DataFrame
    naive_times: int

    def counts(self) -> pd.DataFrame:
        """Counts by verdict (see :func:`verdict_counts`)."""
        return verdict_counts(self.deliveries)


def audit_signatures(
    logs: Iterable[str | os.PathLike] | str | os.PathLike,
    secrets_path: str | os.PathLike,
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> SignatureAudit:
    """Load capture logs and verify every record against the secrets file.

    Examples
    --------
    >>> result = audit_signatures(["captures/"], "secrets.json")  # doctest: +SKIP
    >>> result.counts()  # doctest: +SKIP
    """
    store = read_secrets(secrets_path)
    caps = load_captures(logs, header_prefix=header_prefix)
    verified = verify_frame(caps.deliveries, store, tolerance_s=tolerance_s)
    return SignatureAudit(verified, caps.inputs, caps.naive_times)


def verdict_counts(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Counts by verdict in check order, with shares; verdicts that did not occur are omitted."""
    counts = deliveries["verdict"].value_counts()
    order = [v for v in VERDICTS if v in counts.index]
    out = pd.DataFrame({"verdict": order, "count": [int(counts[v]) for v in order]})
    total = int(out["count"].sum())
    out["share"] = out["count"] / total if total else 0.0
    return out
