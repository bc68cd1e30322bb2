"""audit.report.explore: the period read from the data when none is given, and a missing
parameter named plainly (issue 36, point 12)."""

from __future__ import annotations

import os
import tempfile
import warnings

import pytest

from audit.demo.simulate import simulate
from audit.errors import ParameterError
from audit.ingest.store import ingest
from audit.report.explore import demo_inputs, explore

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A demo week, 2026-10-01 to 2026-10-08 (simulate's default start), and a store of it."""
    root = tmp_path_factory.mktemp("explore")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = simulate(root / "demo", days=7, incidents=20)
        store = root / "store"
        ingest([sim.captures[0].parent], sim.secrets, store)
    return sim, store


def test_explore_a_store_without_a_period_reads_it_from_the_store(week):
    sim, store = week
    run = explore(store=store, secrets_path=sim.secrets)
    period = run.manifest["period"]
    # The store holds October 2026 only (receipts 2026-10-01..08): the month.
    assert period == {
        "label": "2026-10",
        "start": "2026-10-01T00:00:00+00:00",
        "end": "2026-11-01T00:00:00+00:00",
    }
    assert run.manifest["as_of"] == "2026-11-01T00:00:00+00:00"
    assert len(run.findings) > 0


def test_explore_logs_without_a_period_reads_it_from_the_receipt_times(week):
    sim, _ = week
    run = explore(logs=sim.captures, secrets_path=sim.secrets)
    assert run.manifest["period"]["label"] == "2026-10"
    inputs = run.tables["inputs"]
    assert int(inputs["records"].sum()) > 0


def test_a_given_period_is_kept(week):
    sim, store = week
    run = explore(
        store=store,
        secrets_path=sim.secrets,
        period_start="2026-10-02",
        period_end="2026-10-05",
    )
    assert run.manifest["period"]["label"] == "2026-10-02..2026-10-05"


def test_a_missing_parameter_is_named_plainly(week):
    sim, store = week
    with pytest.raises(ParameterError, match=r"^secrets_path is missing: the secrets file"):
        explore(store=store)
    with pytest.raises(ParameterError, match=r"^secrets_path is missing"):
        explore(logs=sim.captures)
    with pytest.raises(ParameterError, match=r"^period_end is missing$"):
        explore(store=store, secrets_path=sim.secrets, period_start="2026-10-01")
    with pytest.raises(ParameterError, match=r"^period_start is missing$"):
        explore(logs=sim.captures, secrets_path=sim.secrets, period_end="2026-10-08")
    with pytest.raises(ParameterError, match=r"^secrets_path must be a path, not int$"):
        explore(store=store, secrets_path=3)


def test_a_store_without_a_receipt_time_says_so(tmp_path, week):
    sim, _ = week
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    empty = tmp_path / "empty"
    ingest([broken], sim.secrets, empty)  # one unreadable record, no receipt time
    with pytest.raises(ParameterError, match="holds no delivery with a receipt time"):
        explore(store=empty, secrets_path=sim.secrets)


def test_the_demo_folder_planted_as_a_link_is_never_read(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fake = tmp_path / "planted"
    (fake / "captures").mkdir(parents=True)
    (fake / "truth.json").write_text('{"period": {"start": "1999-01-01", "end": "1999-02-01"}}')
    (tmp_path / f"audit-demo-seed7-{os.getuid()}").symlink_to(fake)
    (tmp_path / "audit-demo-seed7").symlink_to(fake)  # the name an earlier release used
    got = demo_inputs()
    assert got["period_start"] != "1999-01-01"
    assert not str(got["logs"][0]).startswith(str(fake))
    assert (tmp_path / f"audit-demo-seed7-{os.getuid()}").is_symlink()  # left as it was
