"""An empty path ("$CAPTURES" with the variable unset, in a cron line) is a usage error.

It was read as the current folder: `audit verify ""` audited every capture under the job's
working folder, `--store ""` and `--out ""` wrote there, `--secrets ""` said ".: not a regular
file".
"""

from __future__ import annotations

import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_empty_paths_1"
BODY = '{"id":"evt_e","event":"incident.created","data":{"incidentId":"inc_1"}}'


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "", "--secrets", "s.json"],
        ["verify", "log.jsonl", "--secrets", ""],
        ["verify", "log.jsonl", "--secrets", "s.json", "--out", ""],
        ["ingest", "log.jsonl", "--secrets", "s.json", "--store", ""],
        ["analyze", "log.jsonl", "--secrets", "s.json", "--out", ""],
        ["analyze", "log.jsonl", "--secrets", "s.json", "--subscriptions", "", "--out", "a"],
        ["report", "", "--secrets", "s.json", "--period", "2026-10", "--out", "r"],
        ["report", "log.jsonl", "--secrets", "s.json", "--period", "2026-10", "--mutes", ""],
    ],
)
def test_an_empty_path_is_refused_and_nothing_is_read_or_written(
    tmp_path, monkeypatch, capsys, args
):
    monkeypatch.chdir(tmp_path)  # a folder with captures: the old reading of "" found them
    write_jsonl(
        tmp_path / "log.jsonl", [capture(BODY, signature=sign(SECRET, 1790812800, BODY.encode()))]
    )
    write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(args) == 3  # bad input
    assert "empty path (an unset variable?)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
