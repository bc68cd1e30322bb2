"""Listing-shape unwrapping and subscription snapshot loading (issue 3, section 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from audit.analysis.subscriptions import (
    SNAPSHOT_COLUMNS,
    load_snapshots,
    secret_exposed,
    unwrap_listing,
)
from audit.errors import InputError, LoadError

DATA = Path(__file__).parent / "data" / "snapshots"
SUBS = [{"id": "wh_1", "url": "https://hooks.example/a"}, {"id": "wh_2"}]


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _snapshot(response: object, fetched_at: str = "2026-01-01T00:00:00Z") -> dict:
    return {"fetched_at": fetched_at, "base_url": "https://api.example", "response": response}


# -- unwrap_listing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        SUBS,
        {"data": SUBS},
        {"data": SUBS, "message": "Success"},
        {"data": {"webhooks": SUBS}, "message": "Success"},
        {"data": {"items": SUBS, "total": 2, "page": {"n": 1}}},
    ],
    ids=["list", "data-list", "data-list-message", "data-key", "data-key-with-others"],
)
def test_unwrap_listing_accepts_the_three_shapes(body):
    assert unwrap_listing(body) == SUBS


@pytest.mark.parametrize("body", [[], {"data": []}, {"data": {"webhooks": []}}])
def test_unwrap_listing_empty_listings(body):
    assert unwrap_listing(body) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"webhooks": SUBS}, "without a 'data' field"),
        ({"data": "wh_1"}, "'data' is a string"),
        ({"data": None}, "'data' is null"),
        ({"data": {}}, "holds no list"),
        ({"data": {"id": "wh_1", "url": "https://x"}}, "holds no list"),
        ({"data": {"a": [], "b": []}}, "2 lists (a, b)"),
        ({"data": {"id": "wh_1", "events": ["incident.created"]}}, "item 1 is a string"),
        ([{"id": "wh_1"}, 3], "item 2 is a number"),
        ("wh_1", "listing is a string"),
        (None, "listing is null"),
        (7, "listing is a number"),
    ],
)
def test_unwrap_listing_refuses_other_shapes(body, reason):
    with pytest.raises(ValueError, match=r"^listing") as err:
        unwrap_listing(body)
    assert reason in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("item", "exposed"),
    [
        ({"id": "wh_1"}, False),
        ({"id": "wh_1", "secret": None}, False),
        ({"id": "wh_1", "secret": ""}, False),
        ({"id": "wh_1", "secret": "[redacted]"}, True),
        ({"id": "wh_1", "secret": "whsec_abc"}, True),
    ],
)
def test_secret_exposed(item, exposed):
    assert secret_exposed(item) is exposed


# -- load_snapshots: the fixture files -------------------------------------------------------------


def test_load_fixture_folder_values_and_dtypes():
    df = load_snapshots([DATA])
    assert list(df.columns) == list(SNAPSHOT_COLUMNS)
    assert len(df) == 4
    assert str(df["fetched_at"].dtype) == "datetime64[ns, UTC]"
    assert str(df["created_at"].dtype) == "datetime64[ns, UTC]"
    assert str(df["active"].dtype) == "boolean"
    assert df["secret_exposed"].dtype == bool
    assert df["events"].dtype == object
    assert pd.api.types.is_string_dtype(df["subscription_id"])
    assert pd.api.types.is_string_dtype(df["source"])

    first = df.iloc[0]
    assert first["subscription_id"] == "wh_1"
    assert first["client_id"] == "client_1"
    assert first["url"] == "https://hooks.example/a"
    assert first["events"] == ("incident.created", "incident.status_changed")
    assert first["active"]
    assert first["description"] == "prod"
    assert first["created_at"] == pd.Timestamp("2025-12-01T09:30:00Z")
    assert first["last_delivery_status"] == "failed"
    assert bool(first["secret_exposed"])
    assert first["source"] == str(DATA / "webhooks-20260101T000000Z.json")

    second = df.iloc[1]  # "secret": null is not an exposure; an empty events list stays empty
    assert second["subscription_id"] == "wh_2"
    assert second["events"] == ()
    assert not second["active"]
    assert not bool(second["secret_exposed"])
    assert pd.isna(second["description"])

    third = df.iloc[2]  # bare-list shape, optional fields missing
    assert third["subscription_id"] == "wh_1"
    assert third["events"] is None
    assert third["active"] is pd.NA
    assert pd.isna(third["created_at"])
    assert pd.isna(third["client_id"])

    fourth = df.iloc[3]  # {data: {<key>: [...]}} shape with offsets, converted by hand:
    # 2026-01-03T02:00:00+02:00 is 2026-01-03T00:00:00Z; 2025-12-31T23:00:00-01:00 is 2026-01-01Z.
    assert fourth["fetched_at"] == pd.Timestamp("2026-01-03T00:00:00Z")
    assert fourth["created_at"] == pd.Timestamp("2026-01-01T00:00:00Z")
    assert fourth["events"] == ("incident.action_required",)


def test_secret_values_are_never_kept(tmp_path):
    leaked = "whsec_do_not_keep_me"
    f = _write(tmp_path / "s.json", _snapshot({"data": [{"id": "wh_1", "secret": leaked}]}))
    df = load_snapshots([f])
    assert bool(df.loc[0, "secret_exposed"])
    assert "secret" not in df.columns
    assert leaked not in df.to_csv()
    assert all(leaked not in repr(v) for v in df.to_numpy().ravel())


def test_rows_are_ordered_by_fetched_at_whatever_the_argument_order():
    files = sorted(DATA.glob("*.json"), reverse=True)
    df = load_snapshots(files)
    assert df["fetched_at"].is_monotonic_increasing
    assert list(df["subscription_id"]) == ["wh_1", "wh_2", "wh_1", "wh_3"]


def test_paths_files_folders_globs_and_duplicates():
    one = DATA / "webhooks-20260102T000000Z.json"
    assert len(load_snapshots([one])) == 1
    assert len(load_snapshots(one)) == 1  # a single path is accepted
    assert len(load_snapshots(str(one))) == 1  # and a single string is not split into characters
    assert len(load_snapshots([str(DATA / "webhooks-2026010[12]*.json")])) == 3
    # the same file named three ways is read once
    assert len(load_snapshots([one, DATA, str(DATA / "*02T*.json")])) == 4


def test_folder_reads_only_json_directly_inside(tmp_path):
    _write(tmp_path / "a.json", _snapshot(SUBS))
    (tmp_path / "notes.txt").write_text("not a snapshot")
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "b.json", _snapshot(SUBS))
    df = load_snapshots([tmp_path])
    assert len(df) == 2
    assert set(df["source"]) == {str(tmp_path / "a.json")}


def test_empty_inputs_give_an_empty_frame_with_the_declared_dtypes(tmp_path):
    for df in (load_snapshots([tmp_path]), load_snapshots([])):
        assert list(df.columns) == list(SNAPSHOT_COLUMNS)
        assert df.empty
        assert str(df["fetched_at"].dtype) == "datetime64[ns, UTC]"
        assert str(df["active"].dtype) == "boolean"
    empty_listing = _write(tmp_path / "e.json", _snapshot({"data": []}))
    assert load_snapshots([empty_listing]).empty


# -- load_snapshots: refusals ----------------------------------------------------------------------


def test_missing_path_and_unmatched_glob_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        load_snapshots([tmp_path / "nope.json"])
    with pytest.raises(InputError, match="no snapshot file matches"):
        load_snapshots([str(tmp_path / "*.json")])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"fetched_at": "2026-01-01T00:00:00Z", "secret": "whsec_TOPSECRET", ', "invalid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("[]", "expected an object, found a list"),
        ('{"base_url": "x", "response": []}', "missing 'fetched_at'"),
        ('{"fetched_at": "2026-01-01T00:00:00Z"}', "missing 'base_url', 'response'"),
        ('{"fetched_at": "yesterday", "base_url": "x", "response": []}', "'fetched_at' is not"),
        ('{"fetched_at": 1767225600, "base_url": "x", "response": []}', "'fetched_at' is not"),
        ('{"fetched_at": "2026-01-01", "base_url": 3, "response": []}', "'base_url' must be"),
        (
            '{"fetched_at": "2026-01-01", "base_url": "x", "response": {"webhooks": []}}',
            "without a 'data' field",
        ),
    ],
)
def test_not_a_snapshot_is_a_one_line_load_error_naming_the_file(tmp_path, content, reason):
    f = tmp_path / "bad.json"
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content, encoding="utf-8")
    with pytest.raises(LoadError) as err:
        load_snapshots([f])
    msg = str(err.value)
    assert msg.startswith(f"{f}: ")
    assert reason in msg
    assert "\n" not in msg
    assert "TOPSECRET" not in msg


@pytest.mark.parametrize(
    ("item", "reason", "column", "empty"),
    [
        ({"id": 7}, "item 2: 'id' is a number", "subscription_id", None),
        ({"id": "wh_1", "url": ["https://x"]}, "item 2: 'url' is a list", "url", None),
        ({"id": "wh_1", "events": "incident.created"}, "item 2: 'events' is not", "events", ()),
        ({"id": "wh_1", "events": ["incident.created", 3]}, "'events' is not a list", "events", ()),
        ({"id": "wh_1", "active": "true"}, "item 2: 'active' is a string", "active", None),
        ({"id": "wh_1", "createdAt": "soon"}, "'createdAt' is not an ISO 8601", "created_at", None),
    ],
)
def test_listed_fields_of_the_wrong_type_are_emptied_with_a_warning(
    tmp_path, item, reason, column, empty
):
    # Issue 9: a snapshot must never break later analyses; the odd field is left empty and
    # one warning names the file and the field.
    from audit.analysis.subscriptions import SnapshotWarning

    f = _write(tmp_path / "s.json", _snapshot([{"id": "wh_0"}, item]))
    with pytest.warns(SnapshotWarning) as caught:
        df = load_snapshots([f])
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert msg.startswith(f"{f}: ") and reason in msg
    assert len(df) == 2
    value = df[column].iloc[1]
    assert value == empty if empty is not None else pd.isna(value)


# -- property: any listing survives the trip through a snapshot file in any shape ------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_sub = st.fixed_dictionaries(
    {"id": _text},
    optional={
        "clientId": _text,
        "url": _text,
        "events": st.lists(_text, max_size=3),
        "active": st.booleans(),
        "description": _text,
        "lastDeliveryStatus": _text,
        "createdAt": st.datetimes(
            min_value=pd.Timestamp("2000-01-01").to_pydatetime(),
            max_value=pd.Timestamp("2099-12-31").to_pydatetime(),
        ).map(lambda d: d.isoformat() + "Z"),
        "secret": st.one_of(st.none(), _text),
    },
)


@settings(max_examples=60, deadline=None)
@given(subs=st.lists(_sub, max_size=5), shape=st.sampled_from(["list", "data", "nested"]))
def test_round_trip_any_shape(tmp_path_factory, subs, shape):
    # A secret exposed in the listing is cut from every other field too (audit.redaction): a
    # listing whose secret is also its id or URL round-trips redacted, not as it was.
    exposed = [s["secret"] for s in subs if isinstance(s.get("secret"), str)]
    texts = [v for s in subs for k, v in s.items() if k != "secret" and isinstance(v, str)]
    texts += [e for s in subs for e in s.get("events", [])]
    assume(not any(len(x) >= 10 and x in t for x in exposed for t in texts))
    response = {"list": subs, "data": {"data": subs}, "nested": {"data": {"k": subs}}}[shape]
    f = _write(tmp_path_factory.mktemp("rt") / "s.json", _snapshot(response))
    df = load_snapshots([f])
    assert len(df) == len(subs)
    for (_, row), sub in zip(df.iterrows(), subs, strict=True):
        assert row["subscription_id"] == sub["id"]
        for col, key in [("client_id", "clientId"), ("url", "url"), ("description", "description")]:
            assert (pd.isna(row[col]) and key not in sub) or row[col] == sub[key]
        assert row["events"] == (tuple(sub["events"]) if "events" in sub else None)
        assert (row["active"] is pd.NA) if "active" not in sub else row["active"] == sub["active"]
        if "createdAt" in sub:
            assert row["created_at"] == pd.Timestamp(sub["createdAt"])
        assert bool(row["secret_exposed"]) == bool(sub.get("secret"))


def test_a_known_secret_quoted_in_a_listing_reaches_no_output(tmp_path):
    # Only secret-named fields were redacted: a description quoting a secret of the secrets
    # file went as it was into subscriptions.csv/.parquet (and the report, its tables and
    # findings), though the process knew the value as sensitive.
    from audit.cli import main
    from audit.ingest.signatures import sign
    from tests.builders import capture, write_jsonl, write_secrets

    secret = "whsec_quoted_in_a_description_1"
    body = '{"id":"evt_q","event":"incident.created","data":{"incidentId":"inc_1"}}'
    (tmp_path / "caps").mkdir()
    rec = capture(body, signature=sign(secret, 1790812800, body.encode()))
    write_jsonl(tmp_path / "caps" / "log.jsonl", [rec])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": secret}]})
    item = {"id": "wh_1", "url": "https://hooks.example/1", "description": f"key {secret} here"}
    snap = _write(tmp_path / "snap.json", _snapshot({"data": [item]}))
    out = tmp_path / "out"
    args = ["analyze", str(tmp_path / "caps"), "--secrets", str(secrets)]
    assert main([*args, "--subscriptions", str(snap), "--out", str(out)]) == 0
    written = list(out.iterdir())
    assert written and not [p.name for p in written if secret.encode() in p.read_bytes()]
    got = pd.read_parquet(out / "subscriptions.parquet")
    assert list(got["description"]) == ["key [redacted] here"]


def test_the_library_cuts_a_known_secret_from_a_listing_too(tmp_path):
    # analyze() read the snapshots before the secrets file: no secret was known yet, and a
    # description quoting one went through (the CLI read --secrets first and hid this).
    from audit.analysis.analyze import analyze
    from audit.ingest.signatures import sign
    from tests.builders import capture, write_jsonl, write_secrets

    secret = "whsec_library_order_quoted_2"  # in no other test: not registered before
    body = '{"id":"evt_l","event":"incident.created","data":{"incidentId":"inc_1"}}'
    (tmp_path / "caps").mkdir()
    write_jsonl(
        tmp_path / "caps" / "log.jsonl",
        [capture(body, signature=sign(secret, 1790812800, body.encode()))],
    )
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": secret}]})
    item = {"id": "wh_1", "url": "https://hooks.example/1", "description": f"key {secret} here"}
    snap = _write(tmp_path / "snap.json", _snapshot({"data": [item]}))
    result = analyze([tmp_path / "caps"], secrets, snapshots=[snap])
    assert list(result.subscriptions["description"]) == ["key [redacted] here"]


def test_a_secret_that_is_also_the_id_is_cut_from_the_id(tmp_path):
    # The rule the round trip above assumes away: a value exposed under a secret-like key is
    # cut from every other field of the listing, the id included (found by hypothesis).
    sub = {"id": "0000000000", "secret": "0000000000", "url": "https://r.example/0000000000"}
    df = load_snapshots([_write(tmp_path / "s.json", _snapshot([sub]))])
    assert "0000000000" not in df.to_csv()
    assert df.loc[0, "subscription_id"] == "[redacted]"
