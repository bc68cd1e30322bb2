"""Review of issues 9/11: a signature header named twice with the same spelling is repeated on
every path. The fast path (orjson, last key wins) called such a record valid while the report's
exact path called it malformed."""

from __future__ import annotations

import csv
import hashlib
import hmac
import json

from audit.cli import main
from tests.builders import write_secrets

SECRET = "whsec_review_fast_0123456789"
TS = "1790812800"
BODY = json.dumps({"id": "evt_1", "event": "incident.created", "data": {"incidentId": "inc_1"}})


def _line(twice: bool) -> str:
    good = (
        "sha256=" + hmac.new(SECRET.encode(), f"{TS}.{BODY}".encode(), hashlib.sha256).hexdigest()
    )
    first = f'"X-PhishFort-Signature": "sha256={"0" * 64}", ' if twice else ""
    headers = (
        f'{{"Content-Type": "application/json", {first}"X-PhishFort-Signature": "{good}", '
        f'"X-PhishFort-Timestamp": "{TS}", "X-PhishFort-Delivery-Id": "dlv_1"}}'
    )
    return (
        f'{{"received_at": "2026-10-01T00:00:05Z", "subscription_id": "wh_1", '
        f'"headers": {headers}, "body": {json.dumps(BODY)}, "response_status": 204}}'
    )


def test_a_signature_header_named_twice_is_not_valid_on_the_fast_path(tmp_path, capsys):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    logs = tmp_path / "c.jsonl"
    logs.write_text(_line(False) + "\n" + _line(True) + "\n", encoding="utf-8")
    out = tmp_path / "v.csv"
    assert main(["verify", str(logs), "--secrets", str(secrets), "--out", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as f:
        verdicts = [row["verdict"] for row in csv.DictReader(f)]
    assert verdicts == ["valid", "malformed_signature"]
