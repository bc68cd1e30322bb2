"""Whether the secrets changed since a store's records were verified is one rule
(`Store.secrets_changed`), and `analyze --store` and `verify --store` with `--secrets` write to
the store only when they did, saying so on stderr (issue 35).

The records are built by hand: 3 of 2026-10-02 and 3 of 2026-10-10 signed with the first
secret, 2 of 2026-10-10 with a second one. Secrets A hold the first secret only: 6 valid, 2
``signature_mismatch``. Secrets B add the second, current from 2026-10-05: the 3 later records
signed with the first are ``rotated_secret``, the other 5 valid.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from audit.analysis.analyze import store_as_of
from audit.cli import main
from audit.ingest.load import LoadWarning
from audit.ingest.secrets import read_secrets
from audit.ingest.store import Store
from tests.builders import capture, write_jsonl, write_secrets

OLD, NEW = "whsec_first_secret_of_wh1", "whsec_second_secret_of_wh1"
A = {"wh_1": [{"secret": OLD}]}
B = {"wh_1": [{"secret": OLD}, {"secret": NEW, "valid_from": "2026-10-05T00:00:00Z"}]}
COUNTS_A = {"valid": 6, "signature_mismatch": 2}
COUNTS_B = {"valid": 5, "rotated_secret": 3}


def _record(n: int, day: int, secret: str) -> dict:
    received = datetime(2026, 10, day, 12, 0, n, tzinfo=UTC)
    ts = str(int(received.timestamp()))
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    mac = hmac.new(secret.encode(), f"{ts}.{body}".encode(), hashlib.sha256).hexdigest()
    return capture(body, received_at=received.isoformat(), signature=f"sha256={mac}", timestamp=ts)


@pytest.fixture
def built(tmp_path: Path) -> dict[str, Path]:
    records = [_record(n, 2, OLD) for n in range(3)]
    records += [_record(n, 10, OLD) for n in range(3, 6)]
    records += [_record(n, 10, NEW) for n in range(6, 8)]
    log = write_jsonl(tmp_path / "captures.jsonl", records)
    a = write_secrets(tmp_path / "a.json", A)
    store = tmp_path / "store"
    assert main(["ingest", str(log), "--secrets", str(a), "--store", str(store)]) == 0
    return {"log": log, "a": a, "b": write_secrets(tmp_path / "b.json", B), "store": store}


def _read_only(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``store`` is not writable to this user, as ``os.access`` tells (the tests may run as
    root, whom a folder's mode does not stop)."""
    real_access = os.access

    def no_write_in_store(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).resolve().is_relative_to(store.resolve()):
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", no_write_in_store)


def _state(store: Path) -> tuple[bytes, int]:
    manifest = store / "manifest.json"
    return manifest.read_bytes(), manifest.stat().st_mtime_ns


def _command(kind: str, built: dict[str, Path], secrets: Path, tmp_path: Path) -> list[str]:
    common = ["--store", str(built["store"]), "--secrets", str(secrets)]
    if kind == "verify":
        return ["verify", *common, "--out", str(tmp_path / "v.parquet")]
    return ["analyze", *common, "--out", str(tmp_path / "tables")]


def _verdicts(kind: str, tmp_path: Path) -> dict[str, int]:
    table = tmp_path / ("v.parquet" if kind == "verify" else "tables/deliveries.parquet")
    return pd.read_parquet(table)["verdict"].value_counts().to_dict()


def test_secrets_changed_names_the_subscriptions(built, tmp_path):
    store = Store(built["store"])
    assert store.secrets_changed(read_secrets(built["a"])) == []
    assert store.secrets_changed(read_secrets(built["b"])) == ["wh_1"]  # a rotation added
    more = write_secrets(tmp_path / "c.json", {**A, "wh_2": [{"secret": "whsec_other_one"}]})
    assert store.secrets_changed(read_secrets(more)) == ["wh_2"]  # a subscription added
    gone = write_secrets(tmp_path / "d.json", {"wh_2": [{"secret": "whsec_other_one"}]})
    assert store.secrets_changed(read_secrets(gone)) == ["wh_1", "wh_2"]  # one removed
    assert Store(tmp_path / "empty").secrets_changed(read_secrets(built["b"])) == []


@pytest.mark.parametrize("kind", ["analyze", "verify"])
def test_unchanged_secrets_write_nothing_so_a_read_only_store_is_read(
    kind, built, tmp_path, capsys, monkeypatch
):
    before = _state(built["store"])
    capsys.readouterr()
    _read_only(built["store"], monkeypatch)
    assert main(_command(kind, built, built["a"], tmp_path)) == 0
    err = capsys.readouterr().err
    assert "verified again" not in err and "written" not in err, err
    assert _verdicts(kind, tmp_path) == COUNTS_A
    assert _state(built["store"]) == before  # not even rewritten with the same bytes


@pytest.mark.parametrize("kind", ["analyze", "verify"])
def test_changed_secrets_are_verified_again_and_said(kind, built, tmp_path, capsys):
    before = _state(built["store"])
    capsys.readouterr()
    assert main(_command(kind, built, built["b"], tmp_path)) == 0
    err = capsys.readouterr().err
    store = built["store"]
    said = [line for line in err.splitlines() if "secrets changed" in line]
    assert said == [
        f"audit: {store}: secrets changed for 1 subscription(s): 8 record(s) verified again"
    ]
    assert f"audit: {store}: written" in err
    assert OLD not in err and NEW not in err
    assert _verdicts(kind, tmp_path) == COUNTS_B
    assert _state(built["store"]) != before
    # Written once: the next run with the same secrets writes nothing.
    again = _state(built["store"])
    assert main(_command(kind, built, built["b"], tmp_path)) == 0
    assert "secrets changed" not in capsys.readouterr().err
    assert _state(built["store"]) == again


@pytest.mark.parametrize("kind", ["analyze", "verify"])
def test_a_read_only_store_whose_secrets_changed_is_one_line(
    kind, built, tmp_path, capsys, monkeypatch
):
    before = _state(built["store"])
    capsys.readouterr()
    _read_only(built["store"], monkeypatch)
    assert main(_command(kind, built, built["b"], tmp_path)) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "secrets of 1 subscription(s) changed" in err and "cannot" in err
    assert OLD not in err and NEW not in err
    assert _state(built["store"]) == before


def test_store_as_of_verifies_again_only_when_the_secrets_changed(built, monkeypatch):
    """The library path (`analyze(store=...)`, `analyze_store`): a LoadWarning says what was
    written; with unchanged secrets a read-only store is read."""
    store = built["store"]
    before = _state(store)
    with monkeypatch.context() as m:
        _read_only(store, m)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning at all
            when = store_as_of([], built["a"], store, None)
    assert when == pd.Timestamp("2026-10-10T12:00:07Z")  # the latest receipt
    assert _state(store) == before
    with pytest.warns(LoadWarning, match=r"secrets changed for 1 subscription\(s\)"):
        store_as_of([], built["b"], store, None)
    assert Store(store).secrets_changed(read_secrets(built["b"])) == []  # now stored with B
