"""`audit report --store S --secrets NEW` without LOGS judges the stored records with NEW, as
`audit analyze --store` does (issue 35): a rotation added to the secrets file after the ingest
made stored `valid` records `rotated_secret`, and the report read the old verdicts.

The set is built by hand, so the verdicts under each secrets file are known without the code
under test: 4 records of 2026-10-02 and 6 of 2026-10-10 signed with the first secret, 2 of
2026-10-10 signed with a second one. Secrets A hold the first secret only: 10 valid, 2
``signature_mismatch``. Secrets B add the second, current from 2026-10-05: the 6 later records
signed with the first are ``rotated_secret``, the rest valid. Every request was answered 200, so
SIG-01 (a request that is not valid answered other than 401) fails under A and under B.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from audit.cli import main
from tests.builders import capture, write_jsonl, write_secrets

OLD, NEW = "whsec_first_secret_for_wh1", "whsec_second_secret_for_wh1"
ROTATED_AT = "2026-10-05T00:00:00Z"
A = {"wh_1": [{"secret": OLD}]}
B = {"wh_1": [{"secret": OLD}, {"secret": NEW, "valid_from": ROTATED_AT}]}
#: By hand (module docstring).
COUNTS_A = {"valid": 10, "signature_mismatch": 2}
COUNTS_B = {"valid": 6, "rotated_secret": 6}


def _record(n: int, day: int, secret: str) -> dict:
    received = datetime(2026, 10, day, 12, 0, n, tzinfo=UTC)
    ts = str(int(received.timestamp()))
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    mac = hmac.new(secret.encode(), f"{ts}.{body}".encode(), hashlib.sha256).hexdigest()
    signature = f"sha256={mac}"  # every request accepted: a rejected one is a SIG-01 failure
    when = received.isoformat()
    return capture(body, received_at=when, signature=signature, timestamp=ts, response_status=200)


@pytest.fixture
def built(tmp_path: Path) -> dict[str, Path]:
    records = [_record(n, 2, OLD) for n in range(4)]
    records += [_record(n, 10, OLD) for n in range(4, 10)]
    records += [_record(n, 10, NEW) for n in range(10, 12)]
    nb = nbformat.v4.new_notebook(  # the report's one parameter, nothing drawn: fast
        cells=[nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]})],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, tmp_path / "tiny.ipynb")
    return {
        "log": write_jsonl(tmp_path / "captures.jsonl", records),
        "a": write_secrets(tmp_path / "a.json", A),
        "b": write_secrets(tmp_path / "b.json", B),
        "store": tmp_path / "store",
        "nb": tmp_path / "tiny.ipynb",
    }


def _verdicts(*args: str, out: Path) -> dict[str, int]:
    """`audit verify ... --out out`'s verdict counts, read back from the table it wrote."""
    assert main(["verify", *args, "--out", str(out)]) == 0
    return pd.read_csv(out)["verdict"].value_counts().to_dict()


def _report(built: dict[str, Path], out: Path, *args: str) -> Path:
    common = ["--period", "2026-10", "--notebook", str(built["nb"]), "--quiet"]
    assert main(["report", *args, *common, "--out", str(out)]) in (0, 1)
    (run,) = (out / "2026-10").glob("2*")
    return run


def _read_only(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``store`` is not writable to this user, as ``os.access`` tells (the tests may run as
    root, whom a folder's mode does not stop)."""
    real_access = os.access

    def no_write_in_store(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(path).resolve().is_relative_to(store.resolve()):
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", no_write_in_store)


def _run_verdicts(run: Path) -> dict[str, int]:
    """The verdict counts of a run folder's deliveries (the records the report judged)."""
    (table,) = run.glob("tables/deliveries.*")
    read = pd.read_parquet if table.suffix == ".parquet" else pd.read_csv
    return read(table)["verdict"].value_counts().to_dict()


@pytest.mark.slow
def test_report_from_the_store_judges_with_the_new_secrets(built, tmp_path, capsys):
    log, store = str(built["log"]), str(built["store"])
    assert main(["ingest", log, "--secrets", str(built["a"]), "--store", store]) == 0
    assert _verdicts("--store", store, out=tmp_path / "a.csv") == COUNTS_A  # stored with A
    assert _verdicts(log, "--secrets", str(built["b"]), out=tmp_path / "b.csv") == COUNTS_B
    capsys.readouterr()

    stored = _report(built, tmp_path / "from-store", "--store", store, "--secrets", str(built["b"]))
    err = capsys.readouterr().err
    raw = _report(built, tmp_path / "from-raw", log, "--secrets", str(built["b"]))

    # The report judged the records as the raw captures with B judge them.
    assert _run_verdicts(stored) == _run_verdicts(raw) == COUNTS_B
    # The store was written, and the output says so even with --quiet.
    assert "secrets changed for 1 subscription(s)" in err and "verified again" in err, err
    assert "written" in err
    assert OLD not in err and NEW not in err
    findings = json.loads((stored / "findings.json").read_text())
    assert findings == json.loads((raw / "findings.json").read_text())
    sig01 = [f for f in findings if f["check_id"] == "SIG-01"]
    assert sig01 and all(f["status"] == "fail" for f in sig01)  # rotated_secret: a failure
    # The store now holds B's verdicts.
    assert _verdicts("--store", store, out=tmp_path / "after.csv") == COUNTS_B


def test_unchanged_secrets_write_nothing_so_a_read_only_store_is_read(built, monkeypatch):
    """Load step only (no rendering): with the secrets the store was verified with, nothing is
    written (a store this user cannot write is read as before)."""
    from audit.report.inputs import load_inputs
    from audit.report.params import parse_period

    log, store = str(built["log"]), built["store"]
    assert main(["ingest", log, "--secrets", str(built["a"]), "--store", str(store)]) == 0
    manifest = store / "manifest.json"
    before = (manifest.read_bytes(), manifest.stat().st_mtime_ns)
    _read_only(store, monkeypatch)
    period = parse_period("2026-10")
    inputs = load_inputs(
        [],
        secrets_path=built["a"],
        header_prefix="X-PhishFort",
        store=store,
        start=period.start,
        end=period.end,
    )
    assert inputs.notes == ()
    assert inputs.deliveries["verdict"].value_counts().to_dict() == COUNTS_A
    assert (manifest.read_bytes(), manifest.stat().st_mtime_ns) == before


def test_a_read_only_store_that_needs_verifying_again_is_one_line(
    built, tmp_path, capsys, monkeypatch
):
    log, store = str(built["log"]), built["store"]
    assert main(["ingest", log, "--secrets", str(built["a"]), "--store", str(store)]) == 0
    manifest = store / "manifest.json"
    before = manifest.read_bytes()
    capsys.readouterr()
    _read_only(store, monkeypatch)
    args = ["--store", str(store), "--secrets", str(built["b"]), "--period", "2026-10"]
    code = main(["report", *args, "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 3
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "secrets of 1 subscription(s) changed" in err and "cannot" in err
    assert f"audit ingest --store {store}" in err
    assert OLD not in err and NEW not in err
    assert manifest.read_bytes() == before  # nothing written
    assert not (tmp_path / "r" / "2026-10").exists()


def test_verify_from_the_store_says_it_verified_again(built, tmp_path, capsys):
    """`audit verify --store S --secrets B` re-verified already; it now says so (stderr)."""
    log, store = str(built["log"]), str(built["store"])
    assert main(["ingest", log, "--secrets", str(built["a"]), "--store", store]) == 0
    capsys.readouterr()
    got = _verdicts("--store", store, "--secrets", str(built["b"]), out=tmp_path / "v.csv")
    err = capsys.readouterr().err
    assert got == COUNTS_B
    assert f"audit: {store}: secrets changed for 1 subscription(s)" in err, err
    assert OLD not in err and NEW not in err
