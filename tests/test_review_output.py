"""Review of issue 9: a full disk while ingesting gives an error naming the path, never an
anonymous pyarrow message, and the store's manifest stays as it was."""

from __future__ import annotations

import errno

import pytest

from audit.errors import OutputError
from audit.ingest import parts
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets


class _FullDisk:
    def __init__(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")


def test_full_disk_while_ingesting_names_the_path(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "a.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_output"}]})
    store = tmp_path / "store"
    ingest([logs], secrets, store, workers=1)
    before = (store / "manifest.json").read_bytes()
    write_jsonl(logs / "b.jsonl", [capture("{}", signature="sha256=" + "1" * 64)])
    monkeypatch.setattr(parts.pq, "ParquetWriter", _FullDisk)
    with pytest.raises(OutputError, match=r"part-.*\.parquet: cannot write \(.*No space left"):
        ingest([logs], secrets, store, workers=1)
    assert (store / "manifest.json").read_bytes() == before
