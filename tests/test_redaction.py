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
