"""Listing redaction by secret-like key names and by known values (issue 37, point 6)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.analysis.subscriptions import load_snapshots
from audit.cli import main
from audit.redaction import (
    KEY_QUALIFIERS,
    METADATA_WORDS,
    REDACTED,
    key_words,
    redact_secrets,
    secret_like,
)
from audit.service.snapshots import write_snapshot

# Keys that hold a secret, in the spellings services use.
SECRET_KEYS = [
    "secret",
    "Secret",
    "SECRET",
    "secrets",
    "signingSecret",
    "signing_secret",
    "SIGNING_SECRET",
    "Signing-Secret",
    "webhookSecret",
    "clientsecret",
    "SECRET_V2",
    "secret2",
    "signing_key",
    "signingKey",
    "SigningKey",
    "Signing-Key",
    "signing key",
    "signingkey",
    "SIGNINGKEY",
    "hmac",
    "HMAC",
    "hmacKey",
    "HMACKey",
    "hmac_key",
    "HMAC_SECRET",
    "hmacSecret",
    "apiKey",
    "api_key",
    "API_KEY",
    "ApiKey",
    "APIKey",
    "apikey",
    "x-api-key",
    "X-API-Key",
    "api-keys",
    "privateKey",
    "private_key_pem",
    "secretKey",
    "access_key",
    "token",
    "Token",
    "tokens",
    "access_token",
    "accessToken",
    "accesstoken",
    "refresh_token",
    "authToken",
    "bearerToken2",
    "password",
    "Password",
    "db_password",
    "passwd",
    "passphrase",
    "credentials",
    "Authorization",
]

# Keys that describe a secret, or hold something else, and stay readable.
HARMLESS_KEYS = [
    "id",
    "url",
    "description",
    "key",
    "keys",
    "public_key",
    "monkey",
    "tokenizer",
    "secret_rotated_at",
    "secretRotatedAt",
    "signing_secret_created",
    "signingKeyId",
    "api_key_id",
    "token_count",
    "tokenCount",
    "token_type",
    "tokenExpiresAt",
    "token_url",
    "password_updated_at",
    "hmac_algorithm",
    "secret_version",
    "secret_length",
    "signature",
    "lastDeliveryStatus",
    "",
    "_",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys_in_every_spelling_are_secret_like(key):
    assert secret_like(key)


@pytest.mark.parametrize("key", HARMLESS_KEYS)
def test_harmless_keys_are_not_secret_like(key):
    assert not secret_like(key)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("signingKey", ["signing", "key"]),
        ("Signing-Key", ["signing", "key"]),
        ("HMACSigningKey", ["hmac", "signing", "key"]),
        ("x-api-key", ["x", "api", "key"]),
        ("SECRET_V2", ["secret", "v2"]),
        ("secretRotatedAt", ["secret", "rotated", "at"]),
        ("a.b c__d", ["a", "b", "c", "d"]),
    ],
)
def test_key_words(key, words):
    assert key_words(key) == words


# The same phrase in every spelling style gives the same answer.
STYLES = {
    "snake": lambda ws: "_".join(ws),
    "screaming": lambda ws: "_".join(ws).upper(),
    "kebab": lambda ws: "-".join(ws),
    "header": lambda ws: "-".join(w.capitalize() for w in ws),
    "camel": lambda ws: ws[0] + "".join(w.capitalize() for w in ws[1:]),
    "pascal": lambda ws: "".join(w.capitalize() for w in ws),
    "spaced": lambda ws: " ".join(ws),
    "dotted": lambda ws: ".".join(ws),
}
SECRET_TAILS = [
    ["secret"],
    ["signing", "secret"],
    ["signing", "key"],
    ["hmac", "key"],
    ["hmac", "secret"],
    ["api", "key"],
    ["private", "key"],
    ["access", "token"],
    ["token"],
    ["password"],
    ["passwd"],
    ["credentials"],
]
PREFIXES = st.lists(st.sampled_from(["x", "webhook", "current", "new", "client", "db"]), max_size=2)
METADATA = ["at", "count", "id", "type", "version", "expires", "length", "rotated"]


@settings(max_examples=300, deadline=None)
@given(prefix=PREFIXES, tail=st.sampled_from(SECRET_TAILS), style=st.sampled_from(sorted(STYLES)))
def test_a_secret_phrase_is_secret_like_in_any_style(prefix, tail, style):
    key = STYLES[style]([*prefix, *tail])
    assert secret_like(key), key
    described = STYLES[style]([*prefix, *tail, "rotated", "at"])
    assert not secret_like(described), described


@settings(max_examples=300, deadline=None)
@given(
    prefix=PREFIXES,
    tail=st.sampled_from(SECRET_TAILS),
    meta=st.sampled_from(METADATA),
    style=st.sampled_from(sorted(STYLES)),
)
def test_a_key_ending_in_a_metadata_word_is_not_secret_like(prefix, tail, meta, style):
    key = STYLES[style]([*prefix, *tail, meta])
    assert not secret_like(key), key


def test_a_listing_is_redacted_under_every_secret_like_key_and_only_there():
    kept = {k: f"kept-{i}" for i, k in enumerate(HARMLESS_KEYS)}
    item = {**kept, "nested": {"deeper": []}}
    item |= {k: f"value-of-{i:03d}-{k}" for i, k in enumerate(SECRET_KEYS)}
    item["nested"]["deeper"].append({"hmacKey": {"alg": "sha256", "v": ["x" * 40]}})
    item["flags"] = {"has_secret": True, "secret": None, "token": "", "password": []}
    red, n = redact_secrets({"data": [item]})
    out = red["data"][0]
    assert n == len(SECRET_KEYS) + 1
    assert all(out[k] == REDACTED for k in SECRET_KEYS)
    assert {k: out[k] for k in kept} == kept
    assert out["nested"] == {"deeper": [{"hmacKey": REDACTED}]}
    assert out["flags"] == {"has_secret": True, "secret": None, "token": "", "password": []}
    text = json.dumps(red)
    assert "value-of-" not in text and "x" * 40 not in text


KNOWN = "whsec_Q7zK9vL2mN4p"
OUTSIDE = st.text(st.characters(blacklist_characters=set(KNOWN), codec="utf-8"), max_size=30)


@settings(max_examples=200, deadline=None)
@given(before=OUTSIDE, after=OUTSIDE, where=st.sampled_from(["description", "url", "key", "list"]))
def test_a_known_value_is_cut_wherever_it_stands(before, after, where):
    text = before + KNOWN + after
    item: dict = {"id": "wh_1"}
    if where == "key":
        item[text] = "v"
    elif where == "list":
        item["events"] = [{"note": [text]}]
    else:
        item[where] = text
    red, n = redact_secrets([item], also=[KNOWN])
    assert n == 0 and KNOWN not in json.dumps(red, ensure_ascii=False)
    cut = before + REDACTED + after
    got = red[0]
    assert {"key": cut in got, "list": got.get("events") == [{"note": [cut]}]}.get(
        where, got.get(where) == cut
    )


def test_a_value_exposed_under_a_secret_key_is_cut_from_the_other_fields():
    item = {
        "id": "wh_1",
        "signingKey": KNOWN,
        "url": f"https://hooks.example/1?sig={KNOWN}",
        "description": f"key {KNOWN}.",
        "meta": {"secret": {"alg": "sha256"}},
    }
    red, n = redact_secrets([item])
    assert n == 2
    assert red[0]["url"] == f"https://hooks.example/1?sig={REDACTED}"
    assert red[0]["description"] == f"key {REDACTED}."
    assert red[0]["meta"] == {"secret": REDACTED}


def test_the_snapshot_writer_and_reader_use_the_same_rule(tmp_path):
    listing = {
        "data": [
            {"id": "wh_1", "hmacKey": "hk-1234567890", "secret_rotated_at": "2026-01-01"},
            {"id": "wh_2", "x-api-key": "ak-1234567890", "token_count": 3},
            {"id": "wh_3", "secret": None, "has_secret": False},
        ]
    }
    when = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
    path, listed, redacted = write_snapshot(
        tmp_path, listing, base_url="https://x", fetched_at=when
    )
    assert (listed, redacted) == (3, 2)
    text = path.read_text()
    assert "hk-1234567890" not in text and "ak-1234567890" not in text
    data = json.loads(text)["response"]["data"]
    assert data[0] == {"id": "wh_1", "hmacKey": REDACTED, "secret_rotated_at": "2026-01-01"}
    assert data[1] == {"id": "wh_2", "x-api-key": REDACTED, "token_count": 3}
    assert list(load_snapshots([path])["secret_exposed"]) == [True, True, False]


class _Listing(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


def test_webhooks_list_prints_no_secret_like_value(monkeypatch, capsys):
    item = {
        "id": "wh_1",
        "url": "https://hooks.example/1",
        "events": ["incident.created"],
        "signing_key": "sk-value-1234567",
        "Signing-Key": "sk-value-7654321",
        "password": "pw-value-1234567",
        "tokenCount": 7,
    }
    handler = type("H", (_Listing,), {"body": json.dumps({"data": [item]}).encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AUDIT_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AUDIT_API_KEY", "key-for-the-listing-test-0123")
    try:
        assert main(["webhooks", "list", "--json"]) == 0
        out, err = capsys.readouterr()
        assert "exposed 3 secret values" in err
        printed = json.loads(out)[0]
        assert printed["signing_key"] == printed["Signing-Key"] == printed["password"] == REDACTED
        assert printed["tokenCount"] == 7
        assert main(["webhooks", "list"]) == 0
        out, err = capsys.readouterr()
        assert "[secret exposed]" in out
        assert "value-" not in out + err
    finally:
        server.shutdown()
        server.server_close()


def test_the_docs_list_the_words_of_the_rule():
    text = (Path(__file__).resolve().parents[1] / "docs" / "client.md").read_text()
    for word in sorted(METADATA_WORDS | KEY_QUALIFIERS):
        assert f"`{word}`" in text, word


# --------------------------------------------------------------------------------------------
# Known secrets cut from incident data in every output (issue 36, point 11)
# --------------------------------------------------------------------------------------------


def _leaky_demo(folder: Path) -> tuple[Path, Path, Path, str]:
    """A week of demo data plus two requests that quote wh_siem's secret: a valid delivery
    whose incident data (id, URL, subject) holds it, and a forged request (accepted with 204)
    with it in a header, the delivery id and the body. (captures, secrets, snapshots, secret)"""
    from audit.demo.simulate import simulate
    from audit.ingest.signatures import sign

    sim = simulate(folder, days=7, incidents=20)
    secret = json.loads(sim.secrets.read_text())["wh_siem"][0]["secret"]
    received = datetime(2026, 10, 3, 12, 0, tzinfo=UTC)
    ts = str(int(received.timestamp()))
    data = {
        "incidentId": f"inc_{secret}",
        "clientId": "cl_demo",
        "status": "approval_required",
        "url": f"https://evil.example/login?k={secret}",
        "domain": "evil.example",
        "subject": f"pasted {secret} here",
        "timestamp": "2026-10-03T11:59:50Z",
        # a group of one: the analyses' note on small groups names it
        "incidentClass": f"class_{secret}",
    }
    event = {"id": "evt_leak", "event": "incident.created"}
    event |= {"timestamp": "2026-10-03T11:59:50Z", "data": data}
    body = json.dumps(event)
    headers = {
        "content-type": "application/json",
        "x-phishfort-event": "incident.created",
        "x-phishfort-timestamp": ts,
        "x-phishfort-delivery-id": "dlv_leak",
        "x-phishfort-signature": sign(secret, ts, body.encode()),
    }
    valid = {"received_at": received.isoformat(), "headers": headers, "body": body}
    valid |= {"subscription_id": "wh_siem", "response_status": 204, "response_ms": 40}
    forged_body = json.dumps({"id": f"evt_{secret}", "event": "incident.created", "data": data})
    forged_headers = headers | {
        "x-phishfort-signature": "sha256=" + "0" * 64,
        "x-phishfort-delivery-id": f"dlv_{secret}",
        "x-forwarded-note": secret,
    }
    forged = {"received_at": "2026-10-03T12:05:00Z", "headers": forged_headers}
    forged |= {"body": forged_body, "subscription_id": "wh_siem", "response_status": 204}
    forged["response_ms"] = 12
    with open(sim.captures[0].parent / "leak.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps(valid) + "\n" + json.dumps(forged) + "\n")
    return sim.captures[0].parent, sim.secrets, sim.snapshots[0].parent, secret


def _files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``secret``, or a Parquet file one of whose
    values (decompressed, read back) holds it."""
    import pyarrow.parquet as pq

    needle = secret.encode()
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if needle in path.read_bytes():
            found.append(str(path.relative_to(root)))
        elif path.suffix == ".parquet":
            values = pq.read_table(path).to_pylist()
            if needle in repr(values).encode() or secret in repr(values):
                found.append(f"{path.relative_to(root)} (values)")
    return found


def test_no_file_of_the_run_folder_holds_a_secret_quoted_in_incident_data(tmp_path, capsys):
    captures, secrets, snapshots, secret = _leaky_demo(tmp_path / "demo")
    out = tmp_path / "reports"
    argv = ["report", str(captures), "--secrets", str(secrets), "--subscriptions", str(snapshots)]
    code = main([*argv, "--period", "2026-10-01..2026-10-08", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err  # the demo's planted failures
    (run,) = [p for p in out.rglob("manifest.json")]
    names = {p.name for p in run.parent.rglob("*")}
    assert {"incidents.parquet", "not_valid_requests.parquet", "findings.json"} <= names
    assert {"report.html", "findings.csv", "findings.ocsf.json"} <= names
    # The two requests were read: their (cut) ids are in the tables.
    import pandas as pd

    incidents = pd.read_parquet(next(run.parent.rglob("incidents.parquet")))
    assert f"inc_{REDACTED}" in set(incidents["incident_id"])
    not_valid = pd.read_parquet(next(run.parent.rglob("not_valid_requests.parquet")))
    assert f"dlv_{REDACTED}" in set(not_valid["delivery_id"])
    assert _files_holding(out, secret) == []
    assert _files_holding(out, secret[:24]) == []  # not even a shortened one (a group's name)
    assert secret not in err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_verify_and_analyze_outputs_hold_no_quoted_secret(tmp_path, capsys, suffix):
    captures, secrets, _snapshots, secret = _leaky_demo(tmp_path / "demo")
    log = captures / "leak.jsonl"
    out = tmp_path / "out"
    assert (
        main(["verify", str(log), "--secrets", str(secrets), "--out", str(out / f"v{suffix}")]) == 0
    )
    fmt = suffix.removeprefix(".")
    argv = ["analyze", str(log), "--secrets", str(secrets), "--out", str(out / "tables")]
    assert main([*argv, "--format", fmt]) == 0
    assert secret not in capsys.readouterr().out
    assert (out / "tables" / f"incidents{suffix}").is_file()
    assert _files_holding(out, secret) == []


def test_cut_secrets_cuts_text_bytes_and_lists_and_leaves_the_rest():
    import pandas as pd
    import pyarrow as pa

    from audit.redaction import cut_secrets, cut_secrets_arrow

    value = "whsec_cut_unit_test_value"
    frame = pd.DataFrame(
        {
            "text": pd.Series([f"a {value} b", "whsec_ but not it", None], dtype="str"),
            "body": [value.encode() + b"!", b"x", None],
            "events": [[value, "incident.created"], [], ["e"]],
            "n": [1, 2, 3],
        }
    )
    out = cut_secrets(frame, also=[value])
    assert out["text"].tolist()[:2] == [f"a {REDACTED} b", "whsec_ but not it"]
    assert out["body"].tolist()[:2] == [REDACTED.encode() + b"!", b"x"]
    assert out["events"].tolist()[0] == [REDACTED, "incident.created"]
    assert out["n"].tolist() == [1, 2, 3] and str(out["text"].dtype) == str(frame["text"].dtype)
    assert frame["text"].iloc[0] == f"a {value} b"  # the input is not changed
    clean = frame.iloc[1:]
    assert cut_secrets(clean, also=[value]) is clean  # nothing to cut: no copy
    table = pa.table({"t": [value, "ok"], "b": pa.array([b"1" + value.encode(), None])})
    cut = cut_secrets_arrow(table, also=[value])
    assert cut.to_pydict() == {"t": [REDACTED, "ok"], "b": [b"1" + REDACTED.encode(), None]}
    assert cut.schema == table.schema
