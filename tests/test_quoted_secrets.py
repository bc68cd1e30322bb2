"""A secret quoted in captured data is cut by a reader of the store that has no secrets file
(issue 44, point 5): the ingest, which knows the secrets, records where the records quote one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import audit
import audit.redaction as redaction
from audit.cli import main
from audit.ingest.quoted_secrets import KEY
from audit.redaction import REDACTED
from tests.test_redaction import _files_holding, _leaky_demo


@pytest.fixture
def forget(monkeypatch):
    """Forget every value registered so far: this process then knows no secret, as a later
    reader of the store (another process, another user) does not."""

    def run() -> None:
        monkeypatch.setattr(redaction, "_SENSITIVE", set())
        monkeypatch.setattr(redaction, "_VERSION", redaction._VERSION + 1)
        redaction._LAST.clear()

    yield run
    redaction._LAST.clear()


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """(captures, secrets, store, secret): the leaky week ingested into a store."""
    root = tmp_path_factory.mktemp("quoted")
    captures, secrets, _snapshots, secret = _leaky_demo(root / "demo")
    store = root / "store"
    assert main(["ingest", str(captures), "--secrets", str(secrets), "--store", str(store)]) == 0
    return captures, secrets, store, secret


def _manifest(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


def test_the_ingest_records_where_a_secret_is_quoted_and_not_the_value(leaky):
    _captures, _secrets, store, secret = leaky
    text = (store / "manifest.json").read_text()
    assert secret not in text and secret[:12] not in text
    (where,) = _manifest(store)[KEY]["at"]  # one location per value, whatever its copies
    cell = pd.read_parquet(store / "deliveries" / where["part"], columns=[where["column"]])
    value = cell.iloc[where["row"], 0]
    data = value if isinstance(value, bytes) else value.encode()
    assert data[where["start"] : where["end"]] == secret.encode()


def test_analyze_from_the_store_without_the_secrets_shows_no_quoted_secret(
    leaky, forget, tmp_path, capsys
):
    _captures, _secrets, store, secret = leaky
    forget()
    assert secret not in redaction.known_sensitive()
    out = tmp_path / "tables"
    argv = ["analyze", "--store", str(store), "--out", str(out), "--format", "parquet"]
    assert main(argv) == 0
    assert secret not in capsys.readouterr().out
    # the two requests were read: their ids are there, cut
    assert f"dlv_{REDACTED}" in set(pd.read_parquet(out / "deliveries.parquet")["delivery_id"])
    incidents = pd.read_parquet(out / "incidents.parquet")
    assert f"inc_{REDACTED}" in set(incidents["incident_id"])
    assert _files_holding(out, secret) == []
    assert _files_holding(out, secret[:24]) == []


def test_the_workbench_on_the_store_without_the_secrets_shows_no_quoted_secret(leaky, forget):
    _captures, _secrets, store, secret = leaky
    forget()
    a = audit.open(store=store)
    for name in ("deliveries", "events", "incidents", "status_intervals", "takedown_durations"):
        table = getattr(a, name)
        assert secret not in repr(table.to_dict("list")), name
    assert f"inc_{REDACTED}" in set(a.status_intervals["incident_id"])


def test_a_secret_added_to_the_file_later_is_found_in_the_records_stored_before(
    leaky, forget, tmp_path
):
    captures, secrets, _store, _secret = leaky
    # A request of wh_siem quotes a value no secrets file knows yet; later, a new subscription's
    # secret is that value. Its part is not verified again (wh_siem's secrets did not change).
    later = "whsec_issued_later_to_wh_later_0001"
    logs = tmp_path / "captures"
    shutil.copytree(captures, logs)
    line = json.loads((logs / "leak.jsonl").read_text().splitlines()[1])
    line["headers"]["x-phishfort-delivery-id"] = f"dlv_{later}"
    (logs / "later.jsonl").write_text(json.dumps(line) + "\n")
    store = tmp_path / "store"
    argv = ["ingest", str(logs), "--store", str(store), "--secrets"]
    assert main([*argv, str(secrets)]) == 0
    assert len(_manifest(store)[KEY]["at"]) == 1  # the leak's, not the later value

    def later_parts() -> list[str]:
        (entry,) = [e for e in _manifest(store)["files"] if e["path"].endswith("later.jsonl")]
        return [p["name"] for p in entry["parts"]]

    parts = later_parts()
    more = tmp_path / "secrets-later.json"
    more.write_text(json.dumps(json.loads(secrets.read_text()) | {"wh_later": [{"secret": later}]}))
    more.chmod(0o600)
    assert main([*argv, str(more)]) == 0
    assert later_parts() == parts  # not written again: searched as it was
    assert len(_manifest(store)[KEY]["at"]) == 2
    forget()
    out = tmp_path / "tables"
    assert main(["analyze", "--store", str(store), "--out", str(out)]) == 0
    assert _files_holding(out, later) == []


def test_a_store_written_before_the_locations_is_searched_whole_at_its_next_ingest(
    leaky, forget, tmp_path
):
    captures, secrets, store, _secret = leaky
    older = tmp_path / "store"
    shutil.copytree(store, older)
    manifest = _manifest(older)
    del manifest[KEY]
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert main(["ingest", str(captures), "--secrets", str(secrets), "--store", str(older)]) == 0
    assert _manifest(older)[KEY]["at"] == _manifest(store)[KEY]["at"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda at: at.update(row=10**9),
        lambda at: at.update(start=at["end"]),
        lambda at: at.update(part="month=2026-10/part-none.parquet"),
        lambda at: at.update(column=7),
    ],
)
def test_a_damaged_location_is_one_line(leaky, damage, tmp_path, capsys):
    _captures, _secrets, store, secret = leaky
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    manifest = _manifest(copy)
    damage(manifest[KEY]["at"][0])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["analyze", "--store", str(copy), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("audit: error: ") and len(err.strip().splitlines()) == 1, err
    assert "quoted" in err or "location" in err or "damaged" in err, err
    assert "Traceback" not in err and secret not in err
