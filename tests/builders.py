"""Shared builders: small capture records and files, written the way a receiver stores them."""

from __future__ import annotations

import json
from pathlib import Path


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
