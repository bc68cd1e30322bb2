"""One set of verdict rules: the exact path, the fast path and ``audit.verify`` agree, and agree
with the rules as docs/tables.md ("Verdicts") writes them.

Each request is built as a capture record and judged three ways: the exact path
(``parse_jsonl`` + ``verify_parsed``), the fast path (``verify_jsonl``) and the public
one-request verifier (``audit.ingest.signatures.verify``, given the headers as a receiver sees
them, the subscription's secrets and the logged receipt time). They must give the same verdict,
``hmac_ok``, ``skew_s``, matched secret and reason, and that must be what :func:`oracle` (a
plain transcription of the documented rules, with ``hmac.new``) says.

Known answers were computed with OpenSSL (see tests/test_signatures.py), e.g.::

    printf '%s.' 001790812800 | cat - body1 | openssl dgst -sha256 -hmac 'whsec_test_secret_1'
    printf '%s.' 1790812800 | openssl dgst -sha256 -hmac 'whsec_test_secret_1'    # empty body
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import audit
from audit.ingest.fast import verify_jsonl
from audit.ingest.formats.jsonl import parse_jsonl
from audit.ingest.secrets import SecretStore, SigningSecret
from audit.ingest.signatures import reference_ns, verify, verify_parsed
from audit.ingest.verdict_rules import VERDICTS, check_signature_header, decide
from audit.spec import header_names
from tests.test_signatures import (
    BODY1,
    BODY2,
    BODY3,
    SECRET,
    SIG1,
    SIG_NEW_AT_ROT,
    SIG_OLD_AT_ROT,
    SIG_OLD_BEFORE,
    TS,
)

WANTED = {v: k for k, v in header_names().items()}
SIG_NAME, TS_NAME = "X-PhishFort-Signature", "X-PhishFort-Timestamp"
T = 1790812800  # 2026-10-01T00:00:00Z
ROT = 1792056600  # 2026-10-15T09:30:00Z: wh_1's new_secret is current from here
STORE = SecretStore.from_values(
    {
        "wh_1": [("old_secret", None), ("new_secret", "2026-10-15T09:30:00Z")],
        "wh_2": [(SECRET, None)],
    }
)
# openssl (module docstring): BODY1 signed with the 12-digit header "001790812800", and the
# empty body signed with "1790812800"; b"{not json" signed with "1790812800".
SIG_ZEROS = "sha256=80e1d0e7f15e10e2defcfebc2a61e7ed72a75ddb789d14a6e6d78199f797573e"
SIG_EMPTY = "sha256=77184ab93ed4b26bec467ab2ee33a08359e1b70e3973619c8d580ac4e4299eb0"
SIG_NOT_JSON = "sha256=19cd39f9176f3edef68dd79d4cf5f893d972ee096011e7a2a4135d991f8a0f77"


@dataclass(frozen=True)
class Request:
    """One request as captured: the body, the headers in order, the receipt time as logged
    (int or float Unix seconds, or an aware datetime) and the subscription (None: not logged)."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    received: int | float | datetime
    subscription: str | None = "wh_2"

    def record(self) -> dict:
        names = [n.lower() for n, _ in self.headers]
        headers: object = (
            dict(self.headers) if len(set(names)) == len(names) else [list(h) for h in self.headers]
        )
        rec: dict = {"received_at": _logged(self.received), "headers": headers}
        try:
            rec["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            rec["body_b64"] = base64.b64encode(self.body).decode("ascii")
        if self.subscription is not None:
            rec["subscription_id"] = self.subscription
        return rec

    def header(self, name: str) -> str | None:
        """The header as a receiver reads it: a repeated one combined with ", " (RFC 9110)."""
        values = [v for n, v in self.headers if n.lower() == name.lower()]
        return ", ".join(values) if values else None

    def candidates(self) -> list[SigningSecret]:
        if self.subscription is None:
            return STORE.all_secrets()
        return list(STORE.by_subscription.get(self.subscription, ()))


def _logged(received: int | float | datetime) -> object:
    if isinstance(received, datetime):
        return received.isoformat().replace("+00:00", "Z")
    return received


#: (verdict, detail, hmac_ok, skew_s, matched secret label)
Judged = tuple[str, str | None, bool | None, float | None, str | None]


def three_ways(req: Request) -> Judged:
    """Judge ``req`` by the exact path, the fast path and ``verify``; assert they agree."""
    line = json.dumps(req.record()).encode("utf-8") + b"\n"
    cols = parse_jsonl(line, "log.jsonl", WANTED, 1).columns()
    cols.update(verify_parsed(cols, STORE, tolerance_s=300))
    fast = verify_jsonl(line, "log.jsonl", WANTED, 1, STORE, tolerance_s=300).columns
    names = ("verdict", "detail", "hmac_ok", "skew_s", "matched_secret")
    exact_row = tuple(cols[n][0] for n in names)
    fast_row = tuple(fast[n][0] for n in names)
    candidates = req.candidates()
    one = verify(req.body, req.header(SIG_NAME), req.header(TS_NAME), candidates, now=req.received)
    label = None if one.matched is None else candidates[one.matched].label
    one_row = (one.verdict, one.detail or None, one.hmac_ok, one.skew_s, label)
    assert exact_row == fast_row == one_row
    for x, y, z in zip(exact_row, fast_row, one_row, strict=True):  # bool is not 1, 1.0 not 1
        assert type(x) is type(y) is type(z)
    return exact_row


def oracle(req: Request) -> Judged:
    """The rules of docs/tables.md ("Verdicts"), written out plainly."""
    sig, ts = req.header(SIG_NAME), req.header(TS_NAME)
    if sig is None:
        return ("missing_signature", "no signature header", None, None, None)
    if not sig.startswith("sha256="):
        return (
            "malformed_signature",
            "signature header lacks the 'sha256=' prefix",
            None,
            None,
            None,
        )
    if not re.fullmatch("[0-9a-fA-F]{64}", sig[7:]):
        why = "signature is not 64 hex characters after 'sha256='"
        return ("malformed_signature", why, None, None, None)
    if ts is None:
        return ("malformed_timestamp", "no timestamp header", None, None, None)
    if not re.fullmatch("[0-9]{1,12}", ts):
        why = "timestamp is not a plain integer of at most 12 digits"
        return ("malformed_timestamp", why, None, None, None)
    if isinstance(req.received, datetime):
        received_ns = (
            (req.received - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000
        )
    elif isinstance(req.received, float):
        received_ns = round(req.received * 1e9)
    else:
        received_ns = req.received * 10**9
    skew_ns = received_ns - int(ts) * 10**9
    skew = skew_ns / 1e9
    candidates = req.candidates()
    message = ts.encode() + b"." + req.body
    hits = [
        c
        for c in candidates
        if hmac.new(c.key, message, hashlib.sha256).hexdigest() == sig[7:].lower()
    ]
    hmac_ok = bool(hits) if candidates else None
    label = hits[0].label if hits else None
    if abs(skew_ns) > 300 * 10**9:
        why = f"timestamp differs from receipt by {skew:+.3f} s"
        return ("stale_timestamp", why, hmac_ok, skew, label)
    if not candidates:
        return ("no_secret", "no secret known", None, skew, None)
    if not hits:
        return ("signature_mismatch", "no known secret matches", False, skew, None)
    s = hits[0]
    issued = s.valid_from_ns is None or received_ns >= s.valid_from_ns
    replaced = s.until_ns is not None and received_ns >= s.until_ns
    if issued and not replaced:
        return ("valid", None, True, skew, label)
    if replaced:
        return (
            "rotated_secret",
            f"matches secret {label}, replaced before receipt",
            True,
            skew,
            label,
        )
    return (
        "signature_mismatch",
        f"matches secret {label}, not yet issued at receipt",
        True,
        skew,
        label,
    )


def plain(sig: str | None, ts: str | None, **kw: object) -> Request:
    headers = tuple((n, v) for n, v in ((SIG_NAME, sig), (TS_NAME, ts)) if v is not None)
    fields: dict = {"body": BODY1.encode(), "received": T} | kw
    return Request(headers=headers, **fields)


# --- known answers ---------------------------------------------------------------------------

_NOT_HEX = "signature is not 64 hex characters after 'sha256='"
_NOT_INT = "timestamp is not a plain integer of at most 12 digits"


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (plain(SIG1, TS), ("valid", None, True, 0.0, "wh_2#1")),
        (plain(SIG1, TS, received=T + 300), ("valid", None, True, 300.0, "wh_2#1")),
        (plain(SIG1, TS, received=T - 300), ("valid", None, True, -300.0, "wh_2#1")),
        (
            plain(SIG1, TS, received=T + 300.5),
            (
                "stale_timestamp",
                "timestamp differs from receipt by +300.500 s",
                True,
                300.5,
                "wh_2#1",
            ),
        ),
        (
            plain(SIG1, TS, received=datetime(2026, 10, 1, 0, 5, 0, 1, tzinfo=UTC)),
            (
                "stale_timestamp",
                "timestamp differs from receipt by +300.000 s",
                True,
                300.000001,
                "wh_2#1",
            ),
        ),
        (
            plain(SIG1, TS, received=T - 301),
            (
                "stale_timestamp",
                "timestamp differs from receipt by -301.000 s",
                True,
                -301.0,
                "wh_2#1",
            ),
        ),
        (
            plain(SIG_OLD_BEFORE, TS, received=T + 400),  # stale and a mismatch: stale wins
            ("stale_timestamp", "timestamp differs from receipt by +400.000 s", False, 400.0, None),
        ),
        (
            plain(SIG1, TS, received=T + 400, subscription="wh_unknown"),  # stale before no_secret
            ("stale_timestamp", "timestamp differs from receipt by +400.000 s", None, 400.0, None),
        ),
        (
            plain(SIG1, TS, subscription="wh_unknown"),
            ("no_secret", "no secret known", None, 0.0, None),
        ),
        (plain(SIG_ZEROS, "001790812800"), ("valid", None, True, 0.0, "wh_2#1")),  # 12 digits
        (plain(SIG_ZEROS, "0001790812800"), ("malformed_timestamp", _NOT_INT, None, None, None)),
        (plain(SIG1, "+1790812800"), ("malformed_timestamp", _NOT_INT, None, None, None)),
        (plain(SIG1, "1.7908128e9"), ("malformed_timestamp", _NOT_INT, None, None, None)),
        (plain(SIG1, None), ("malformed_timestamp", "no timestamp header", None, None, None)),
        (plain(None, TS), ("missing_signature", "no signature header", None, None, None)),
        (plain(None, "nope"), ("missing_signature", "no signature header", None, None, None)),
        (
            plain(SIG1[7:], TS),
            (
                "malformed_signature",
                "signature header lacks the 'sha256=' prefix",
                None,
                None,
                None,
            ),
        ),
        (plain(SIG1[:-1], TS), ("malformed_signature", _NOT_HEX, None, None, None)),
        (
            plain(SIG1.upper().replace("SHA256=", "sha256="), TS),
            ("valid", None, True, 0.0, "wh_2#1"),
        ),
        (
            plain(SIG1, TS, body=BODY1.encode() + b" "),
            ("signature_mismatch", "no known secret matches", False, 0.0, None),
        ),
        (plain(SIG_EMPTY, TS, body=b""), ("valid", None, True, 0.0, "wh_2#1")),
        (plain(SIG_NOT_JSON, TS, body=b"{not json"), ("valid", None, True, 0.0, "wh_2#1")),
        (
            Request(BODY1.encode(), ((SIG_NAME, SIG1), (SIG_NAME.lower(), SIG1), (TS_NAME, TS)), T),
            ("malformed_signature", _NOT_HEX, None, None, None),  # two signature headers
        ),
        # wh_1 rotates at ROT: old_secret before, new_secret from then on.
        (
            plain(SIG_OLD_AT_ROT, str(ROT), received=ROT + 5, subscription="wh_1"),
            (
                "rotated_secret",
                "matches secret wh_1#1, replaced before receipt",
                True,
                5.0,
                "wh_1#1",
            ),
        ),
        (
            plain(SIG_NEW_AT_ROT, str(ROT), received=ROT - 1, subscription="wh_1"),
            (
                "signature_mismatch",
                "matches secret wh_1#2, not yet issued at receipt",
                True,
                -1.0,
                "wh_1#2",
            ),
        ),
        (
            plain(SIG_NEW_AT_ROT, str(ROT), received=ROT, subscription="wh_1"),
            ("valid", None, True, 0.0, "wh_1#2"),
        ),
        (
            plain(SIG_OLD_AT_ROT, str(ROT), received=ROT + 5, subscription=None),  # inferred
            (
                "rotated_secret",
                "matches secret wh_1#1, replaced before receipt",
                True,
                5.0,
                "wh_1#1",
            ),
        ),
    ],
)
def test_known_answers(req, expected):
    assert three_ways(req) == expected
    assert oracle(req) == expected


def test_the_current_secret_is_tried_first_when_two_hold_the_same_value():
    body = BODY1.encode()
    same = [
        SigningSecret("wh_1", 0, None, ROT * 10**9, b"old_secret"),
        SigningSecret("wh_1", 1, ROT * 10**9, None, b"old_secret"),  # re-issued, same value
    ]
    got = verify(body, SIG_OLD_AT_ROT, str(ROT), same, now=ROT + 5)
    assert (got.verdict, got.matched) == ("valid", 1)
    got = verify(body, SIG_OLD_AT_ROT, str(ROT), same[:1], now=ROT + 5)
    assert (got.verdict, got.matched) == ("rotated_secret", 0)


def test_plain_secrets_are_tried_in_order_and_current_forever():
    body = BODY1.encode()
    got = verify(body, SIG1, TS, [b"other", SECRET, SECRET], now=T)
    assert (got.verdict, got.matched, got.hmac_ok, got.skew_s) == ("valid", 1, True, 0.0)
    assert verify(body, SIG1, TS, SECRET.encode(), now=T).ok
    assert verify(body, SIG1, TS, [], now=T).detail == "no secret known"


def test_reference_times():
    assert reference_ns(datetime(2026, 10, 1, 0, 0, 0, 1, tzinfo=UTC)) == T * 10**9 + 1000
    # A float is read as the capture loader reads received_at: to the nearest float ns (floats
    # are 256 ns apart here), so a receiver and the audit of its capture agree.
    assert abs(reference_ns(T + 0.25) - (T * 10**9 + 250_000_000)) <= 128
    assert reference_ns(T) == T * 10**9
    with pytest.raises(ValueError, match="must be timezone-aware"):
        reference_ns(datetime(2026, 10, 1))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be finite"):
            reference_ns(bad)


def test_the_rules_are_the_public_names():
    assert audit.verify is verify
    assert audit.VERDICTS is VERDICTS
    assert VERDICTS[1:6] == (
        "missing_signature",
        "malformed_signature",
        "malformed_timestamp",
        "stale_timestamp",
        "no_secret",
    )


@pytest.mark.parametrize(
    "value",
    [
        "sha256=" + "0" * 31 + " " + "0" * 32,  # 64 characters, one a space
        "sha256=" + "0" * 32 + " " + "0" * 32,  # 64 hex digits and a space (fromhex skips it)
        "sha256=" + "é" * 64,
        "sha256=" + "0g" * 32,
    ],
)
def test_odd_hex_is_malformed(value):
    assert check_signature_header(value) == _NOT_HEX


def test_decide_uses_the_mac_it_is_given():
    secret = SigningSecret("wh_2", 0, None, None, SECRET.encode())
    calls = []

    def mac(i: int, message: bytes) -> bytes:
        calls.append((i, message))
        return bytes.fromhex(SIG1[7:])

    got = decide(SIG1, TS, b"anything", T * 10**9, [secret], tolerance_ns=0, mac=mac)
    assert (got.verdict, got.matched) == ("valid", 0)
    assert calls == [(0, TS.encode() + b".anything")]


# --- the property: three verifiers, one set of rules ------------------------------------------

_KEYS = ["old_secret", "new_secret", SECRET, "wrong"]
_MOSTLY = st.sampled_from([True] * 9 + [False])


def _stamp(base: int, draw: st.DrawFn) -> str:
    digits = str(base + draw(st.integers(-400, 400)))
    if draw(st.integers(0, 9)) < 6:  # mostly well formed, so the later checks are reached
        return digits
    return draw(
        st.sampled_from(
            [
                digits,
                digits,
                "0" + digits,  # 11 digits
                "00" + digits,  # 12
                "000" + digits,  # 13: malformed
                "+" + digits,
                " " + digits,
                digits + " ",
                "1.7e9",
                "",
                "100000000000",
                "1000000000000",
            ]
        )
    )


def _signature(good: str, draw: st.DrawFn) -> str:
    hexpart = good[7:]
    if draw(st.integers(0, 9)) < 6:
        return good
    return draw(
        st.sampled_from(
            [
                good,
                good,
                good,
                "sha256=" + hexpart.upper(),
                hexpart,
                "SHA256=" + hexpart,
                good[:-1],
                good + "0",
                "sha256=" + "g" * 64,
                "sha256=" + hexpart[:31] + " " + hexpart[32:],
                "",
            ]
        )
    )


@st.composite
def requests(draw: st.DrawFn) -> Request:
    base = draw(st.sampled_from([T, ROT]))
    ts = _stamp(base, draw)
    ts_int = int(ts) if ts.strip().isdigit() and ts.isascii() and "+" not in ts else base
    ts_int = ts_int if ts_int < 4 * 10**9 else base  # receipt times past 2096: unreadable
    offset_us = draw(
        st.one_of(
            st.sampled_from([0, 300, -300, 301, -301]).map(lambda s: s * 10**6),
            st.sampled_from([300_000_001, -300_000_001, 300_500_000, 299_999_999]),
            st.integers(-400 * 10**6, 400 * 10**6),
        )
    )
    kind = draw(st.sampled_from(["int", "float", "datetime"]))
    received: int | float | datetime
    if kind == "int":
        received = ts_int + offset_us // 10**6
    elif kind == "float":
        received = ts_int + offset_us / 10**6
    else:
        received = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            seconds=ts_int, microseconds=offset_us
        )
    body = draw(
        st.one_of(
            st.sampled_from([b"", BODY1.encode(), BODY2.encode("utf-8"), BODY3, b"{not json"]),
            st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
        )
    )
    key = draw(st.sampled_from(_KEYS))
    signed_ts = ts if draw(st.integers(0, 9)) else str(ts_int + 1)
    good = (
        "sha256="
        + hmac.new(key.encode(), signed_ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    )
    sig = _signature(good, draw)
    names = draw(
        st.sampled_from(
            [
                (SIG_NAME, TS_NAME),
                (SIG_NAME.lower(), TS_NAME.upper()),
                (SIG_NAME.upper(), TS_NAME.lower()),
            ]
        )
    )
    headers: list[tuple[str, str]] = []
    if draw(_MOSTLY):  # sometimes no signature header
        headers.append((names[0], sig))
        if not draw(_MOSTLY):  # sometimes two of them
            headers.append((SIG_NAME, _signature(good, draw)))
    if draw(_MOSTLY):
        headers.append((names[1], ts))
    sub = draw(st.sampled_from(["wh_1", "wh_1", "wh_2", "wh_unknown", None]))
    return Request(body, tuple(headers), received, sub)


@settings(max_examples=200, deadline=None)
@given(req=requests())
def test_three_verifiers_agree_with_the_rules(req):
    assert three_ways(req) == oracle(req)


def test_the_docs_list_the_verdicts_in_check_order():
    text = (Path(__file__).parents[1] / "docs" / "tables.md").read_text(encoding="utf-8")
    section = text[text.index("### Verdicts") : text.index("## Analysis tables")]
    rows = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    assert tuple(rows) == VERDICTS


def _judged(received: datetime, tolerance_s: float) -> list[str]:
    """The verdicts of one valid request received at ``received``: exact, fast, verify()."""
    req = plain(SIG1, TS, received=received)
    line = json.dumps(req.record()).encode("utf-8") + b"\n"
    cols = parse_jsonl(line, "log.jsonl", WANTED, 1).columns()
    exact = verify_parsed(cols, STORE, tolerance_s=tolerance_s)["verdict"][0]
    fast = verify_jsonl(line, "log.jsonl", WANTED, 1, STORE, tolerance_s=tolerance_s)
    one = verify(req.body, SIG1, TS, SECRET, now=received, tolerance_s=tolerance_s)
    return [exact, fast.columns["verdict"][0], one.verdict]


def test_another_tolerance_is_applied_to_the_microsecond():
    at = datetime(2026, 10, 1, tzinfo=UTC) + timedelta(seconds=1000)
    assert _judged(at, 1000) == ["valid"] * 3
    assert _judged(at + timedelta(microseconds=1), 1000) == ["stale_timestamp"] * 3
    assert _judged(at - timedelta(seconds=2000, microseconds=1), 1000) == ["stale_timestamp"] * 3


@pytest.mark.parametrize(
    ("signature", "detail"),
    [
        (SIG1, "ignored url 5 (not a string)"),
        (SIG_EMPTY, "no known secret matches; ignored url 5 (not a string)"),
    ],
)
def test_a_note_of_the_loader_follows_the_verdicts_reason(signature, detail):
    line = json.dumps(plain(signature, TS).record() | {"url": 5}).encode("utf-8") + b"\n"
    cols = parse_jsonl(line, "log.jsonl", WANTED, 1).columns()
    assert verify_parsed(cols, STORE, tolerance_s=300)["detail"] == [detail]
    assert verify_jsonl(line, "log.jsonl", WANTED, 1, STORE, tolerance_s=300).columns["detail"] == [
        detail
    ]
