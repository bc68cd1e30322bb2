"""Reports from the evidence store and from raw captures give identical findings (issue 11)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from audit.cli import main
from audit.errors import InputError
from audit.report.explore import demo_inputs, explore
from audit.report.inputs import load_inputs
from audit.report.params import parse_period
from audit.report.pipeline import compute
from audit.report.rundir import findings_records
from tests.builders import demo_report_inputs


@pytest.fixture(scope="module")
def demo():
    """The built-in demo month (planted failing findings: SIG-01, SIG-02, DLV-01, ...)."""
    return demo_inputs()


def _computed(demo, **store):
    period, params, inputs = demo_report_inputs(demo, **store)
    loaded = inputs.deliveries
    computed = compute(inputs, params, period)
    assert inputs.deliveries is None  # handed over to the analyses, freed when they are done
    with pytest.raises(InputError, match="already computed once"):  # a clear error, not None
        compute(inputs, params, period)
    return replace(inputs, deliveries=loaded), computed


def test_store_and_raw_give_the_same_findings_and_tables(demo, tmp_path):
    raw_inputs, raw = _computed(demo)
    got_inputs, got = _computed(demo, store=tmp_path / "store")
    assert (tmp_path / "store" / "manifest.json").is_file()  # the logs were ingested first
    assert len(got_inputs.deliveries) == len(raw_inputs.deliveries) > 1000
    want = findings_records(raw.findings)
    assert sum(f["status"] == "fail" for f in want) >= 5  # the demo's planted failures
    assert findings_records(got.findings) == want
    for name, table in raw.tables.items():
        if name == "inputs":  # raw: paths as given; store: resolved paths, same files
            assert sorted(got.tables[name]["sha256"]) == sorted(table["sha256"])
            continue
        pd.testing.assert_frame_equal(
            got.tables[name].reset_index(drop=True), table.reset_index(drop=True)
        )


def test_raw_captures_keep_bodies_only_as_evidence_of_records_not_valid(demo, tmp_path):
    """From raw captures, the report holds no body of a valid record (memory at 1M): the
    deliveries carry none, and the evidence is exactly what the store gives for the records
    that are not valid."""
    from audit.ingest.query import not_valid_evidence

    raw_inputs, _ = _computed(demo)
    got_inputs, _ = _computed(demo, store=tmp_path / "store")
    assert "body" not in raw_inputs.deliveries.columns
    raw_ev, got_ev = raw_inputs.evidence, got_inputs.evidence
    d = raw_inputs.deliveries
    not_valid = d[d["verdict"] != "valid"]
    assert 0 < len(raw_ev) == len(not_valid) < len(d)
    assert set(zip(raw_ev["source"], raw_ev["line"], strict=True)) == set(
        zip(not_valid["source"], not_valid["line"], strict=True)
    )
    assert raw_ev["body"].notna().sum() > len(raw_ev) // 2  # rejected requests, as received
    store_ev = not_valid_evidence(tmp_path / "store")
    assert len(store_ev) == len(got_ev) == len(raw_ev)

    def by_place(ev: pd.DataFrame) -> pd.DataFrame:
        ev = ev.assign(source=ev["source"].map(lambda s: Path(s).name))
        return ev.sort_values(["source", "line"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(by_place(raw_ev), by_place(store_ev))


def test_a_store_alone_needs_no_logs_and_reads_only_the_period(demo, tmp_path):
    store = tmp_path / "store"
    _computed(demo, store=store)  # ingest once
    none = {**demo, "logs": []}
    _, again = _computed(none, store=store)
    _, raw = _computed(demo)
    assert findings_records(again.findings) == findings_records(raw.findings)
    with pytest.raises(InputError, match="at least one capture"):
        _computed(none)


def test_explore_takes_a_store(demo, tmp_path):
    store = tmp_path / "store"
    kw = dict(
        secrets_path=demo["secrets_path"],
        snapshots=demo["snapshots"],
        period_start=demo["period_start"],
        period_end=demo["period_end"],
    )
    a = explore(logs=demo["logs"], **kw)
    b = explore(logs=demo["logs"], store=store, **kw)
    c = explore(store=store, **kw)  # no logs, no demo: the store alone
    pd.testing.assert_frame_equal(a.findings, b.findings)
    pd.testing.assert_frame_equal(a.findings, c.findings)


def _tiny_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]})],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_audit_report_store_writes_the_same_findings_json(demo, tmp_path):
    period = demo["period_start"][:7]
    nb = _tiny_notebook(tmp_path / "tiny.ipynb")
    common = ["--secrets", demo["secrets_path"], "--subscriptions", *demo["snapshots"]]
    common += ["--period", period, "--notebook", str(nb), "--quiet"]
    raw_out, store_out, store = tmp_path / "raw", tmp_path / "stored", tmp_path / "store"
    assert main(["report", *demo["logs"], *common, "--out", str(raw_out)]) == 1
    assert main(["report", *demo["logs"], *common, "--store", str(store), "--out",
                 str(store_out)]) == 1  # fmt: skip
    shutil.rmtree(store_out)
    assert main(["report", *common, "--store", str(store), "--out", str(store_out)]) == 1
    (a,) = (raw_out / period).glob("2*")
    (b,) = (store_out / period).glob("2*")
    assert (a / "findings.json").read_bytes() == (b / "findings.json").read_bytes()
    assert (a / "findings.csv").read_bytes() == (b / "findings.csv").read_bytes()
    findings = json.loads((a / "findings.json").read_text())
    assert {"SIG-01", "SIG-02", "DLV-01"} <= {
        f["check_id"] for f in findings if f["status"] == "fail"
    }


def test_report_without_logs_or_store_is_a_usage_error(demo, tmp_path, capsys):
    code = main(["report", "--secrets", demo["secrets_path"], "--period", "2026-10",
                 "--out", str(tmp_path / "r")])  # fmt: skip
    assert code != 0 and "give LOGS, or --store DIR" in capsys.readouterr().err


def test_a_bad_snapshot_is_told_before_the_store_is_read(demo, tmp_path, monkeypatch):
    """The small inputs are read first: a bad snapshot file stops the report before the store's
    long read, and before a process is forked for the incident fold (found in review)."""
    import audit.report.inputs

    bad = tmp_path / "snapshot.json"
    bad.write_text("{not json", encoding="utf-8")

    def read(*_a, **_k):
        raise AssertionError("the store was read before the snapshot was checked")

    monkeypatch.setattr(audit.report.inputs, "read_store", read)  # as it calls it
    period = parse_period("2026-10")
    with pytest.raises(InputError, match=r"snapshot\.json"):
        load_inputs(
            [],
            secrets_path=demo["secrets_path"],
            snapshots=[bad],
            header_prefix="X-PhishFort-",
            store=tmp_path / "store",
            start=period.start,
            end=period.end,
            clock_start="created",
        )
