"""The signature audit as one call: load captures, read secrets, verify every record."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from audit.ingest.load import frame_from_columns, load_captures
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.signatures import VERDICTS, verify_columns
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX

__all__ = [
    "VERDICT_COLUMNS",
    "SignatureAudit",
    "audit_signatures",
    "verdict_counts",
    "verify_frame",
]

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
    caps = load_captures(logs, header_prefix=header_prefix, secrets=store, tolerance_s=tolerance_s)
    return SignatureAudit(caps.deliveries, caps.inputs, caps.naive_times)


def verify_frame(
    deliveries: pd.DataFrame, secrets: SecretStore, *, tolerance_s: float = CLOCK_TOLERANCE_S
) -> pd.DataFrame:
    """Verify every loaded delivery as of its own ``received_at``, across secret rotations.

    The rules are those of :func:`audit.ingest.signatures.verify_columns` (the one implementation).

    Returns
    -------
    pandas.DataFrame
        A copy with ``verdict``, ``detail``, ``hmac_ok`` (nullable boolean: a known secret of the
        subscription matches, whatever the timestamp checks said), ``skew_s`` (received_at minus
        the timestamp header, seconds), ``matched_secret`` (``<subscription>#<n>``, the n-th
        issued secret; never the value) and ``subscription_id`` filled where inferred.

    Examples
    --------
    >>> verified = verify_frame(load_captures("log.jsonl").deliveries, store)  # doctest: +SKIP
    >>> verified["verdict"].value_counts()  # doctest: +SKIP
    """
    received = deliveries["received_at"].to_numpy(dtype="datetime64[ns]").view("int64").tolist()
    v = verify_columns(
        deliveries["signature"].tolist(),
        deliveries["timestamp_header"].tolist(),
        deliveries["body"].tolist(),
        received,
        deliveries["subscription_id"].tolist(),
        deliveries["verdict"].tolist(),
        deliveries["detail"].tolist(),
        secrets,
        tolerance_s=tolerance_s,
    )
    out = deliveries.copy()
    for name, series in frame_from_columns(dict(vars(v))).items():
        out[name] = series.set_axis(out.index)
    return out


def verdict_counts(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Counts by verdict in check order, with shares; verdicts that did not occur are omitted."""
    counts = deliveries["verdict"].value_counts()
    order = [v for v in VERDICTS if v in counts.index]
    order += sorted(v for v in counts.index if v not in VERDICTS)  # never drop one silently
    out = pd.DataFrame({"verdict": order, "count": [int(counts[v]) for v in order]})
    total = int(out["count"].sum())
    out["share"] = out["count"] / total if total else 0.0
    return out
