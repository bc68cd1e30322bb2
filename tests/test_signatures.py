"""Known-answer and property tests for signing and verification.

Every expected digest below was computed outside this code with OpenSSL, e.g.::

    printf '%s.' 1790812800 | cat - body1 | openssl dgst -sha256 -hmac 'whsec_test_secret_1'

where ``body1`` holds the exact bytes of ``BODY1`` (``printf '%s' '<text>' > body1``).
"""

from __future__ import annotations

import hashlib
import hmac
import json

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.ingest.load import load_captures
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import sign, verify
from audit.ingest.verification import verify_frame
from tests.builders import capture, write_jsonl

SECRET = "whsec_test_secret_1"
TS = "1790812800"  # 2026-10-01T00:00:00Z
BODY1 = (
    '{"id":"evt_00000000-0000-4000-8000-000000000001","event":"incident.created",'
    '"timestamp":"2026-10-01T00:00:00Z","data":{"incidentId":"inc_1"}}'
)
SIG1 = "sha256=dc72fba9b94864a6d474ec9ee16fd4051ffac920b0e8309afecdf2dba682573a"
# Non-ASCII text body (Cyrillic IDN, umlaut, accented word, emoji), signed over its UTF-8 bytes.
BODY2 = (
    '{"id":"evt_00000000-0000-4000-8000-000000000002","event":"incident.created",'
    '"timestamp":"2026-10-01T00:00:00Z","data":{"incidentId":"inc_2",'
    '"url":"https://пример.example/ü","subject":"café 🎣"}}'
)
SIG2 = "sha256=80641c49360888cdaae9366ae803a6f8d3b5ecce8d270d1856696fc22a74334d"
# Not UTF-8: printf '\xff\xfe\x00{"id":"evt_3"}' > body3
BODY3 = b'\xff\xfe\x00{"id":"evt_3"}'
BODY3_B64 = "//4AeyJpZCI6ImV2dF8zIn0="  # base64 -w0 body3
SIG3 = "sha256=437c857f5741e9d15f7754bb5b405b6b9186426258b002c63c7a54f967d0ab60"

# Rotation of wh_1 at 2026-10-15T09:30:00Z (= 1792056600) from old_secret to new_secret.
ROTATION = {"wh_1": [("old_secret", None), ("new_secret", "2026-10-15T09:30:00Z")]}
SIG_OLD_AT_ROT = "sha256=f3c07c4267bdf177ec991ad2d69da73a7ce77f066cbd525b6ef117a8db231930"
SIG_NEW_AT_ROT = "sha256=cfd63a6125e7b2e8a8356c9f510662b91cd0df0defd847aaaff6f649a274a84d"
SIG_OLD_BEFORE = "sha256=586e1531ce7d52b319cbbd383f8dea53ac744471fd76cbaf829c189795987501"
SIG_NEW_BEFORE = "sha256=03fef664fb51e714e3a6a6bd51256e46e0f3d88bd0320f379bdcd45b80440d85"


def verdicts(tmp_path, records, secrets=None, **kw):
    """Load records through the real loader and verify them; return the verified frame."""
    path = write_jsonl(tmp_path / "log.jsonl", records)
    store = SecretStore.from_values(secrets or {"wh_1": [(SECRET, None)]})
    return verify_frame(load_captures([path], **kw).deliveries, store)


def test_hmac_primitive_matches_github_published_vector():
    # GitHub's documented example (plain HMAC of the body, no timestamp prefix).
    mac = hmac.new(b"It's a Secret to Everybody", b"Hello, World!", hashlib.sha256).hexdigest()
    assert mac == "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


@pytest.mark.parametrize(
    ("body", "expected"), [(BODY1.encode(), SIG1), (BODY2.encode("utf-8"), SIG2), (BODY3, SIG3)]
)
def test_sign_matches_openssl(body, expected):
    assert sign(SECRET, TS, body) == expected
    assert sign(SECRET.encode(), int(TS), body) == expected


@pytest.mark.parametrize(
    ("received_at", "verdict"),
    [
        ("2026-10-01T00:05:00Z", "valid"),  # +300 s
        ("2026-09-30T23:55:00Z", "valid"),  # -300 s
        ("2026-10-01T00:05:01Z", "stale_timestamp"),  # +301 s
        ("2026-09-30T23:54:59Z", "stale_timestamp"),  # -301 s
        ("2026-10-01T00:05:00.000001Z", "stale_timestamp"),  # 300.000001 s
        ("2026-10-01T02:05:00+02:00", "valid"),  # same instant as +300 s, other offset
        ("2026-10-01T02:05:01+02:00", "stale_timestamp"),
        ("2026-09-30T19:55:00-04:00", "valid"),  # -300 s, negative offset
        (1790813100, "valid"),  # Unix seconds, +300
        (1790813101.0, "stale_timestamp"),
    ],
)
def test_clock_window_boundaries(tmp_path, received_at, verdict):
    v = verdicts(tmp_path, [capture(BODY1, signature=SIG1, received_at=received_at)])
    assert v.loc[0, "verdict"] == verdict
    assert bool(v.loc[0, "hmac_ok"]) is True  # the HMAC is right either way: separate result


def test_skew_is_received_minus_timestamp(tmp_path):
    v = verdicts(tmp_path, [capture(BODY1, signature=SIG1, received_at="2026-09-30T23:58:20Z")])
    assert v.loc[0, "skew_s"] == -100.0


def test_upper_case_hex_is_valid(tmp_path):
    upper = "sha256=" + SIG1.removeprefix("sha256=").upper()
    assert verdicts(tmp_path, [capture(BODY1, signature=upper)]).loc[0, "verdict"] == "valid"


@pytest.mark.parametrize(
    "headers",
    [
        {"x-phishfort-signature": SIG1, "x-phishfort-timestamp": TS},
        {"X-PHISHFORT-SIGNATURE": SIG1, "X-Phishfort-Timestamp": TS},
        [["x-PhishFort-Signature", SIG1], ["X-PhishFort-Timestamp", TS]],
    ],
    ids=["lower", "mixed", "pairs"],
)
def test_header_names_are_case_insensitive_and_pairs_accepted(tmp_path, headers):
    assert verdicts(tmp_path, [capture(BODY1, headers=headers)]).loc[0, "verdict"] == "valid"


def test_header_prefix_switches_brand(tmp_path):
    headers = {"X-Service-Signature": SIG1, "X-Service-Timestamp": TS}
    v = verdicts(tmp_path, [capture(BODY1, headers=headers)], header_prefix="X-Service")
    assert v.loc[0, "verdict"] == "valid"
    v = verdicts(tmp_path, [capture(BODY1, headers=headers)])
    assert v.loc[0, "verdict"] == "missing_signature"


def test_non_ascii_body_is_verified_over_utf8_bytes(tmp_path):
    v = verdicts(tmp_path, [capture(BODY2, signature=SIG2)])
    assert v.loc[0, "verdict"] == "valid"
    assert v.loc[0, "incident_id"] == "inc_2"


def test_non_utf8_body_given_as_base64(tmp_path):
    rec = capture(None, signature=SIG3, body_b64=BODY3_B64)
    v = verdicts(tmp_path, [rec])
    assert v.loc[0, "verdict"] == "valid"
    assert v.loc[0, "body"] == BODY3


def test_reserialised_body_is_a_mismatch(tmp_path):
    reserialised = json.dumps(json.loads(BODY1), indent=1)  # same JSON, other whitespace
    v = verdicts(tmp_path, [capture(reserialised, signature=SIG1)])
    assert v.loc[0, "verdict"] == "signature_mismatch"
    assert bool(v.loc[0, "hmac_ok"]) is False


@pytest.mark.parametrize(
    ("timestamp", "received_at", "signature", "verdict", "matched"),
    [
        ("1792056000", "2026-10-15T09:20:10Z", SIG_OLD_BEFORE, "valid", "wh_1#1"),
        ("1792056000", "2026-10-15T09:20:10Z", SIG_NEW_BEFORE, "signature_mismatch", "wh_1#2"),
        ("1792056600", "2026-10-15T09:30:05Z", SIG_NEW_AT_ROT, "valid", "wh_1#2"),
        ("1792056600", "2026-10-15T09:30:05Z", SIG_OLD_AT_ROT, "rotated_secret", "wh_1#1"),
        # Exactly at valid_from the new secret is current.
        ("1792056600", "2026-10-15T09:30:00Z", SIG_NEW_AT_ROT, "valid", "wh_1#2"),
    ],
)
def test_rotation(tmp_path, timestamp, received_at, signature, verdict, matched):
    rec = capture(BODY1, signature=signature, timestamp=timestamp, received_at=received_at)
    v = verdicts(tmp_path, [rec], ROTATION)
    assert v.loc[0, "verdict"] == verdict
    assert v.loc[0, "matched_secret"] == matched
    assert bool(v.loc[0, "hmac_ok"]) is True


def test_missing_subscription_id_is_inferred(tmp_path):
    secrets = {"wh_other": [("zzz", None)], "wh_1": [(SECRET, None)]}
    recs = [
        capture(BODY1, signature=SIG1, subscription_id=None),
        capture(BODY2, signature=SIG1, subscription_id=None),  # wrong signature for this body
    ]
    v = verdicts(tmp_path, recs, secrets)
    assert v.loc[0, "verdict"] == "valid"
    assert v.loc[0, "subscription_id"] == "wh_1"
    assert v.loc[1, "verdict"] == "signature_mismatch"
    assert v["subscription_id"].isna()[1]


def test_rotated_secret_inferred_without_subscription(tmp_path):
    rec = capture(
        BODY1,
        signature=SIG_OLD_AT_ROT,
        timestamp="1792056600",
        received_at="2026-10-15T09:30:05Z",
        subscription_id=None,
    )
    v = verdicts(tmp_path, [rec], ROTATION)
    assert (v.loc[0, "verdict"], v.loc[0, "subscription_id"]) == ("rotated_secret", "wh_1")


def test_no_secret_for_subscription(tmp_path):
    v = verdicts(tmp_path, [capture(BODY1, signature=SIG1, subscription_id="wh_unknown")])
    assert v.loc[0, "verdict"] == "no_secret"
    assert v["hmac_ok"].isna()[0]


@pytest.mark.parametrize(
    ("signature", "timestamp", "verdict"),
    [
        (None, TS, "missing_signature"),
        ("sha1=" + "a" * 40, TS, "malformed_signature"),
        ("SHA256=" + SIG1[7:], TS, "malformed_signature"),
        ("sha256=" + SIG1[8:], TS, "malformed_signature"),  # 63 hex
        ("sha256=" + SIG1[7:] + "0", TS, "malformed_signature"),  # 65 hex
        ("sha256=" + "g" * 64, TS, "malformed_signature"),
        (SIG1, None, "malformed_timestamp"),
        (SIG1, "1.7908128e9", "malformed_timestamp"),
        (SIG1, "+1790812800", "malformed_timestamp"),
        (SIG1, " 1790812800", "malformed_timestamp"),
        (SIG1, "1790812800 ", "malformed_timestamp"),
        (SIG1, "Infinity", "malformed_timestamp"),
        (SIG1, "-1790812800", "malformed_timestamp"),
        (SIG1, "١٧٩٠٨١٢٨٠٠", "malformed_timestamp"),  # Arabic-Indic digits are not ASCII digits
        (SIG1, "", "malformed_timestamp"),
        # A missing signature wins over a bad timestamp: checks run in order.
        (None, "nope", "missing_signature"),
        ("sha256=xyz", "nope", "malformed_signature"),
    ],
)
def test_format_checks_in_order(tmp_path, signature, timestamp, verdict):
    v = verdicts(tmp_path, [capture(BODY1, signature=signature, timestamp=timestamp)])
    assert v.loc[0, "verdict"] == verdict
    assert v["hmac_ok"].isna()[0]


def test_stale_checked_before_no_secret(tmp_path):
    rec = capture(BODY1, signature=SIG1, received_at="2026-10-02T00:00:00Z", subscription_id="x")
    assert verdicts(tmp_path, [rec]).loc[0, "verdict"] == "stale_timestamp"


def test_repeated_signature_header_is_malformed(tmp_path):
    headers = [
        ["X-PhishFort-Signature", SIG1],
        ["X-PhishFort-Signature", SIG1],
        ["X-PhishFort-Timestamp", TS],
    ]
    assert verdicts(tmp_path, [capture(BODY1, headers=headers)]).loc[0, "verdict"] == (
        "malformed_signature"
    )


def test_single_verify_matches_batch_rules():
    body = BODY1.encode()
    assert verify(body, SIG1, TS, SECRET, now=1790813100).verdict == "valid"
    assert verify(body, SIG1, TS, SECRET, now=1790813101).verdict == "stale_timestamp"
    assert verify(body, SIG1, TS, SECRET, now=1790813101, tolerance_s=600).verdict == "valid"
    assert verify(body, SIG1, TS, ["other", SECRET], now=1790812800).matched == 1
    assert verify(body, SIG1, TS, [], now=1790812800).verdict == "no_secret"
    assert verify(body + b" ", SIG1, TS, SECRET, now=1790812800).verdict == "signature_mismatch"


# --- properties ------------------------------------------------------------------------------

secrets_st = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "")
bodies = st.binary(max_size=300)
stamps = st.integers(min_value=0, max_value=4_102_444_800)


@given(secret=secrets_st, body=bodies, ts=stamps)
def test_sign_then_verify_holds(secret, body, ts):
    sig = sign(secret, ts, body)
    assert verify(body, sig, str(ts), secret, now=ts).verdict == "valid"


@given(secret=secrets_st, body=bodies.filter(bool), ts=stamps, data=st.data())
def test_any_single_byte_change_of_body_breaks_it(secret, body, ts, data):
    sig = sign(secret, ts, body)
    i = data.draw(st.integers(0, len(body) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != body[i]))
    changed = body[:i] + bytes([new]) + body[i + 1 :]
    assert verify(changed, sig, str(ts), secret, now=ts).verdict == "signature_mismatch"


@given(secret=secrets_st, body=bodies, ts=stamps, data=st.data())
def test_any_single_digit_change_of_timestamp_breaks_it(secret, body, ts, data):
    sig = sign(secret, ts, body)
    text = str(ts)
    i = data.draw(st.integers(0, len(text) - 1))
    digit = data.draw(st.sampled_from([d for d in "0123456789" if d != text[i]]))
    changed = text[:i] + digit + text[i + 1 :]
    # Same reference time as the changed stamp so only the HMAC decides.
    assert verify(body, sig, changed, secret, now=int(changed)).verdict == "signature_mismatch"


def test_the_timestamp_header_is_signed_as_received(tmp_path):
    # printf '%s.' 01790812800 | cat - body1 | openssl dgst -sha256 -hmac 'whsec_test_secret_1'
    sig = "sha256=b285575b0d0767fa1ed42123312891a4528ec1d0a276e07556f970f592b3ca15"
    v = verdicts(tmp_path, [capture(BODY1, signature=sig, timestamp="01790812800")])
    assert v.loc[0, "verdict"] == "valid"
    assert verify(BODY1.encode(), sig, "01790812800", SECRET, now=1790812800).verdict == "valid"
    assert verify(BODY1.encode(), SIG1, "01790812800", SECRET, now=1790812800).verdict == (
        "signature_mismatch"
    )


def test_fused_and_separate_verification_agree_on_the_demo(tmp_path):
    from audit.demo import simulate
    from audit.ingest.load import load_captures
    from audit.ingest.secrets import read_secrets
    from audit.ingest.verification import audit_signatures

    sim = simulate(tmp_path / "d", seed=3, days=8, incidents=30)
    fused = audit_signatures(sim.captures, sim.secrets).deliveries
    separate = verify_frame(load_captures(sim.captures).deliveries, read_secrets(sim.secrets))
    assert set(fused["verdict"]) > {"valid", "unreadable", "signature_mismatch"}
    pd.testing.assert_frame_equal(fused, separate[fused.columns])


@pytest.mark.parametrize("stamp", ["1" + "0" * 400, "9" * 5000, "1" * 13])
def test_an_absurdly_long_timestamp_is_malformed_not_a_crash(tmp_path, stamp):
    v = verdicts(tmp_path, [capture(BODY1, signature=SIG1, timestamp=stamp)])
    assert v.loc[0, "verdict"] == "malformed_timestamp"
    assert verify(BODY1.encode(), SIG1, stamp, SECRET, now=0).verdict == "malformed_timestamp"
