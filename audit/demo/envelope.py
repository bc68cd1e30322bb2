"""A delivery's body and headers as the service sends them (spec 2.2, 5.1), and small helpers."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime

__all__ = ["PREFIX", "UA", "dump", "envelope", "iso", "new_uuid", "signed_headers"]

PREFIX, UA = "X-PhishFort", "PhishFort-Webhooks/1.0"


def iso(t: float, spec: str = "milliseconds") -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def new_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def dump(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def envelope(eid: str, event: str, t: float, data: dict) -> str:
    """The delivery body (spec 2.2) as the service sends it: compact UTF-8 JSON."""
    return dump({"id": eid, "event": event, "timestamp": iso(t), "data": data})


def signed_headers(event: str, did: str, ts: int, sig: str | None, ua: str = UA) -> list:
    out = [("Content-Type", "application/json"), ("User-Agent", ua)]
    out += [(f"{PREFIX}-Signature", sig)] if sig else []
    out += [(f"{PREFIX}-Event", event), (f"{PREFIX}-Delivery-Id", did)]
    return [*out, (f"{PREFIX}-Timestamp", str(ts))]
