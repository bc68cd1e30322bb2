"""What travels on the wire, written one way for everyone: the delivery envelope, the signed
delivery headers and the ``GET /webhooks`` snapshot document.

The local fake (:mod:`audit.service.fake`), the demo simulator (:mod:`audit.demo`) and the
client's ``audit snapshot`` command all build these here, so that they agree byte for byte.

>>> envelope("evt_1", "webhook.test", 1790812800, {})
'{"id":"evt_1","event":"webhook.test","timestamp":"2026-10-01T00:00:00.000Z","data":{}}'
>>> [n for n, _ in signed_headers("webhook.test", "dlv_1", 1790812800, "sha256=ab")][2:]
['X-PhishFort-Signature', 'X-PhishFort-Event', 'X-PhishFort-Delivery-Id', 'X-PhishFort-Timestamp']
>>> snapshot_document({"data": []}, base_url="https://api.example", fetched_at=1790812800)
{'fetched_at': '2026-10-01T00:00:00Z', 'base_url': 'https://api.example', 'response': {'data': []}}
>>> snapshot_stem(1790812800.5)
'webhooks-20261001T000000Z'
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = [
    "USER_AGENT",
    "compact_json",
    "envelope",
    "iso",
    "signed_headers",
    "snapshot_document",
    "snapshot_stem",
]

#: The User-Agent the service's deliveries carry.
USER_AGENT = "PhishFort-Webhooks/1.0"


def _utc(t: datetime | float) -> datetime:
    if isinstance(t, datetime):
        return t.astimezone(UTC)
    return datetime.fromtimestamp(t, UTC)


def iso(t: datetime | float, timespec: str = "milliseconds") -> str:
    """A time (aware datetime or Unix seconds) as the service writes it: ISO 8601 UTC, ``Z``."""
    return _utc(t).isoformat(timespec=timespec).replace("+00:00", "Z")


def compact_json(obj: Any) -> str:
    """JSON as the service sends it: no spaces, UTF-8 characters kept."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def envelope(event_id: str, event: str, timestamp: datetime | float, data: dict) -> str:
    """A delivery body (spec 2.2): ``{id, event, timestamp, data}`` as compact JSON."""
    return compact_json({"id": event_id, "event": event, "timestamp": iso(timestamp), "data": data})


def signed_headers(
    event: str,
    delivery_id: str,
    timestamp: int,
    signature: str | None,
    user_agent: str = USER_AGENT,
    prefix: str = DEFAULT_HEADER_PREFIX,
) -> list[tuple[str, str]]:
    """A delivery's headers (spec 5.1) in the order the service sends them.

    ``signature`` is the ``sha256=...`` value (:func:`audit.ingest.signatures.sign`); None leaves
    the header out (an unsigned request).
    """
    out = [("Content-Type", "application/json"), ("User-Agent", user_agent)]
    out += [(f"{prefix}-Signature", signature)] if signature else []
    out += [(f"{prefix}-Event", event), (f"{prefix}-Delivery-Id", delivery_id)]
    return [*out, (f"{prefix}-Timestamp", str(timestamp))]


def snapshot_document(body: Any, *, base_url: str, fetched_at: datetime | float) -> dict:
    """A snapshot file's content: ``{fetched_at, base_url, response}``.

    ``fetched_at`` is written to the second, or to the microsecond when it has a fraction.
    Redact secrets from ``body`` before (:func:`audit.redaction.redact_secrets`).
    """
    return {"fetched_at": iso(fetched_at, "auto"), "base_url": base_url, "response": body}


def snapshot_stem(fetched_at: datetime | float) -> str:
    """A snapshot file's name without ``.json``: ``webhooks-<UTC time to the second>``."""
    return f"webhooks-{_utc(fetched_at):%Y%m%dT%H%M%SZ}"
