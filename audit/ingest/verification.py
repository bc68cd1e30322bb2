"""The signature audit as one call: load captures, read secrets, verify every record."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.ingest.load import frame_from_columns, load_captures
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.signatures import VERDICTS, verify_columns
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX
from audit.tables import VERDICT_COLUMNS as DECLARED_VERDICT_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "VERDICT_COLUMNS",
    "SignatureAudit",
    "audit_signatures",
    "verdict_count_rows",
    "verdict_counts",
    "verify_frame",
]

#: Columns of ``verdicts.csv`` (``audit verify``), in order: those declared so in
#: :mod:`audit.tables` (a list, which selects columns of a frame).
VERDICT_COLUMNS: list[str] = list(DECLARED_VERDICT_COLUMNS)


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
    logs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    secrets_path: str | os.PathLike[str],
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> SignatureAudit:
    """Load capture logs and verify every record against the secrets file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (tmp / "log.jsonl").write_text('{"received_at": 0, "headers": {}, "body": ""}\\n')
    >>> _ = (tmp / "secrets.json").write_text('{"wh_1": [{"secret": "whsec_demo"}]}')
    >>> (tmp / "secrets.json").chmod(0o600)
    >>> result = audit_signatures([tmp / "log.jsonl"], tmp / "secrets.json")
    >>> result.counts()
                 verdict  count  share
    0  missing_signature      1    1.0
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
    >>> import tempfile, pathlib
    >>> from audit.ingest.signatures import sign
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> sig = sign("whsec_demo", 1790812800, b"{}")
    >>> _ = log.write_text('{"received_at": 1790812801, "subscription_id": "wh_1", "body": "{}",'
    ...                    f' "headers": {{"X-PhishFort-Signature": "{sig}",'
    ...                    ' "X-PhishFort-Timestamp": "1790812800"}}\\n')
    >>> store = SecretStore.from_values({"wh_1": [("whsec_demo", None)]})
    >>> verified = verify_frame(load_captures(log).deliveries, store)
    >>> verified[["verdict", "skew_s", "matched_secret"]].to_dict("records")
    [{'verdict': 'valid', 'skew_s': 1.0, 'matched_secret': 'wh_1#1'}]
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
    import pandas as pd  # start-up: `audit verify` loads this module and never needs pandas

    counts = deliveries["verdict"].value_counts()
    order = _check_order(counts.index)
    out = pd.DataFrame({"verdict": order, "count": [int(counts[v]) for v in order]})
    total = int(out["count"].sum())
    out["share"] = out["count"] / total if total else 0.0
    return out


def verdict_count_rows(counts: Mapping[str, int]) -> list[tuple[str, int, float]]:
    """The rows of :func:`verdict_counts` as ``(verdict, count, share)`` tuples, from counts by
    verdict, without pandas (``audit verify``); verdicts counted zero times are omitted.

    >>> verdict_count_rows({"valid": 3, "signature_mismatch": 1, "no_secret": 0})
    [('valid', 3, 0.75), ('signature_mismatch', 1, 0.25)]
    """
    order = _check_order(v for v, n in counts.items() if n)
    total = sum(counts[v] for v in order)
    return [(v, counts[v], counts[v] / total) for v in order]


def _check_order(verdicts: Iterable[str]) -> list[str]:
    """Verdicts in check order; any other after them, sorted (never dropped silently)."""
    found = set(verdicts)
    return [v for v in VERDICTS if v in found] + sorted(found - set(VERDICTS))
