"""Review of issues 9 and 10: what the rendered report shows, and controls that cannot judge."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from audit.cli import main
from audit.report.format import table
from tests.test_findings import DAY, analysis, one, run, snapshots, sub


def test_url_columns_defang_a_bare_domain():
    df = pd.DataFrame({"domain": ["login.evil.example"], "url": ["evil.example/x"]})
    html = str(table(df, {"domain": ("Domain", "url"), "url": ("URL", "url")}, caption="C"))
    assert "login[.]evil[.]example" in html and "evil[.]example/x" in html
    assert "login.evil.example" not in html


def test_sub_05_without_last_delivery_status_is_skip_not_pass(tmp_path):
    snaps = snapshots(tmp_path, (DAY, [sub("wh_1", last=None), sub("wh_2", last="failed")]))
    f = run(analysis(snapshots=snaps), only="SUB-05")
    assert one(f, "SUB-05", "wh_1")["status"] == "skip"
    assert "no lastDeliveryStatus" in one(f, "SUB-05", "wh_1")["reason"]
    assert one(f, "SUB-05", "wh_2")["status"] == "fail"


@pytest.mark.slow
def test_demo_report_defangs_domains_and_describes_its_figures(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--quiet"]) == 0
    html = next(tmp_path.glob("reports/2026-10/*/report.html")).read_text(encoding="utf-8")
    text = re.sub(r"<img[^>]*>", "", html)
    # incident domains (attacker-controlled) are never shown live
    assert re.findall(r"\b[a-z0-9-]+\.example\b", text) == []
    assert "demobank-login[.]example" in text
    alts = re.findall(r'<img alt="([^"]*)"', html)
    assert alts and all(len(a) > 40 for a in alts)
    assert any(a.startswith("Scatter of clock skew") for a in alts)
    assert not any(a.startswith("Histogram of clock skew") for a in alts)


@pytest.mark.slow
def test_a_template_without_cell_ids_leaves_stderr_to_progress_lines(tmp_path, capsys):
    import json

    from audit.report.render import default_notebook
    from tests.builders import capture, write_jsonl, write_secrets

    nb = json.loads(default_notebook().read_text(encoding="utf-8"))
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": []}
    nb["cells"].append({**cell, "source": ["x = 1"]})  # no "id": an older tool wrote it
    template = tmp_path / "mine.ipynb"
    template.write_text(json.dumps(nb), encoding="utf-8")
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_report"}]})
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    main([*args, "--out", str(tmp_path / "r"), "--notebook", str(template)])
    err = capsys.readouterr().err
    assert "rendering the report" in err and "missing an id" not in err
    assert next((tmp_path / "r").glob("2026-10/*/report.html")).exists()


def test_bidi_controls_in_incident_data_are_shown_not_obeyed():
    rlo = chr(0x202E)
    df = pd.DataFrame({"domain": [rlo + "elpmaxe.live"], "class": ["x" + chr(0x2066) + "y"]})
    html = str(table(df, {"domain": ("Domain", "url"), "class": ("Class", "text")}, caption="C"))
    assert rlo not in html and chr(0x2066) not in html
    assert "\\u202eelpmaxe[.]live" in html and "x\\u2066y" in html


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"cells": 5}'])
def test_a_template_that_is_not_a_notebook_is_refused_before_any_run_folder(
    content, tmp_path, capsys
):
    from tests.builders import capture, write_jsonl, write_secrets

    template = tmp_path / "bad.ipynb"
    template.write_bytes(content)
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_report"}]})
    out = tmp_path / "r"
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10", "--quiet"]
    assert main([*args, "--out", str(out), "--notebook", str(template)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("audit: error: --notebook:") and "is not a notebook" in err
    assert not out.exists()
