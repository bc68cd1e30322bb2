"""A store whose parts were written before and after a column was declared reads as one table:
the older parts' missing column is null (adding a capture field needs no new store format)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from audit.ingest.scan import scan


def _part(path, **columns):
    pq.write_table(pa.table(columns), path)
    return path


def test_parts_before_and_after_a_new_column_read_together(tmp_path):
    # by hand: the older part has no `url`; the newer one has it
    old = _part(tmp_path / "a.parquet", source=["a.jsonl", "a.jsonl"], line=[1, 2])
    new = _part(tmp_path / "b.parquet", source=["b.jsonl"], line=[1], url=["https://x/hook"])
    for files in ([old, new], [new, old]):
        got = scan(files, ["source", "line", "url"], "", [])
        assert got.column_names == ["source", "line", "url"]
        assert got.to_pylist() == [
            {"source": "a.jsonl", "line": 1, "url": None},
            {"source": "a.jsonl", "line": 2, "url": None},
            {"source": "b.jsonl", "line": 1, "url": "https://x/hook"},
        ]


def test_a_column_no_part_holds_reads_as_nulls_of_its_declared_type(tmp_path):
    old = _part(tmp_path / "a.parquet", source=["a.jsonl"], line=[1])
    got = scan([old], ["source", "line", "response_ms"], "", [])
    assert got.column("response_ms").type == pa.float64()
    assert got.column("response_ms").to_pylist() == [None]
