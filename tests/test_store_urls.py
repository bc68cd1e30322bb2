"""Every store command refuses a URL as ``--store`` in one line, exit 3, before touching
anything (issue 35): ``audit ingest ... --store s3://bucket/x`` made the local folder
``./s3:/bucket/x/`` and ended in ``internal error: ArrowInvalid``."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.cli import main
from tests.builders import capture, write_jsonl, write_secrets

URLS = [
    "s3://bucket/x",
    "gs://bucket/x",
    "az://container/x",
    "abfs://container@account.dfs.core.windows.net/x",
    "https://example.org/store",
    "http://example.org/store",
    "file:///tmp/store",
    "S3://BUCKET/x",
    "hdfs+ha://cluster/x",
]


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A capture log and a secrets file in a folder that is also the working directory (a URL
    read as a path would be created there)."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "log.jsonl", [capture('{"id": "evt_1"}', signature="sha256=00")])
    write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "whsec_kept_out"}]})
    return ["log.jsonl", "--secrets", "secrets.json"]


def _commands(inputs: list[str], url: str) -> dict[str, list[str]]:
    store = ["--store", url]
    return {
        "ingest": ["ingest", *inputs, *store],
        "verify": ["verify", *inputs, *store, "--out", "v.csv"],
        "verify, no LOGS": ["verify", *store, "--out", "v.csv"],
        "analyze": ["analyze", *inputs, *store, "--out", "tables"],
        "report": ["report", *inputs, *store, "--period", "2026-10", "--out", "reports"],
        "report, no LOGS": ["report", *inputs[1:], *store, "--period", "2026-10"],
    }


@pytest.mark.parametrize("url", URLS)
def test_every_store_command_refuses_a_url_in_one_line(inputs, tmp_path, url, capsys):
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, argv in _commands(inputs, url).items():
        assert main(argv) == 3, name
        out, err = capsys.readouterr()
        assert out == "", name
        shown = url.replace("container@", "…@")  # what precedes @ may be credentials
        assert err.startswith(f"audit: error: --store {shown}: a URL ("), (name, err)
        assert err.count("\n") == 1 and "Traceback" not in err and "internal" not in err, name
        assert "local folder" in err and "docs/scale.md" in err, name
        # Nothing made: no ./s3:/bucket/x, no store, no table, no report folder.
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name


def test_credentials_in_a_url_are_not_shown(inputs, capsys):
    for name, argv in _commands(inputs, "s3://AKIAEXAMPLE:wJalrXUtn/K7MDENG@bucket/x").items():
        assert main(argv) == 3, name
        err = capsys.readouterr().err
        assert "AKIAEXAMPLE" not in err and "wJalrXUtn" not in err, name
        assert "--store s3://…@bucket/x: a URL (s3://)" in err, name


def test_local_paths_with_a_colon_are_still_stores(inputs, tmp_path, capsys):
    """Only ``scheme://`` is a URL: a folder named ``a:b`` or ``s3:x`` stays a local store."""
    assert main(["ingest", *inputs, "--store", "s3:x"]) == 0
    assert main(["ingest", *inputs, "--store", str(tmp_path / "a:b" / "store")]) == 0
    assert (tmp_path / "s3:x" / "manifest.json").is_file()
    assert (tmp_path / "a:b" / "store" / "manifest.json").is_file()


@pytest.mark.parametrize("url", URLS)
def test_audit_open_refuses_a_url_as_the_cli_does(url, tmp_path, monkeypatch):
    """Issue 43: ``audit.open(store="s3://...")`` read the local folder ``s3:/bucket/x`` and
    said it held no manifest; it is refused in the CLI's line, before anything is touched."""
    import audit
    from audit.errors import InputError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as caught:
        audit.open(store=url)
    message = str(caught.value)
    scheme = url.split("://")[0]
    assert message.startswith(f"store {scheme}://") and "\n" not in message
    assert f": a URL ({scheme}://); " in message and "container@" not in message
    assert "local folder" in message and list(tmp_path.iterdir()) == []
