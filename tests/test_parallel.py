"""Verification on every core: pieces cover files exactly; rows equal the loader's."""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import warnings

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from audit.ingest.parallel import plan_pieces
from audit.ingest.query import load_deliveries
from audit.ingest.store import ingest
from audit.ingest.verdicts import verify_logs
from audit.ingest.verification import VERDICT_COLUMNS, audit_signatures
from audit.spec import header_names
from tests.test_fast_path import valid
from tests.test_signatures import SECRET


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    size=st.integers(1, 80),
    tail=st.booleans(),
    bom=st.booleans(),
)
def test_pieces_cover_the_file_with_true_line_numbers(tmp_path_factory, lines, size, tail, bom):
    path = tmp_path_factory.mktemp("p") / "f.jsonl"
    data = b"\n".join(lines) + (b"\n" if tail and lines else b"")
    # A file that opens with gzip's magic bytes is read as gzip, whatever its name (a corrupt one
    # is a LoadError: test_load, test_hostile_inputs); plain pieces are what is tested here.
    assume(bom or not data.startswith(b"\x1f\x8b"))
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    data = ((b"\xef\xbb\xbf" if bom else b"") + data).removeprefix(b"\xef\xbb\xbf")
    pieces = list(plan_pieces(path, piece_bytes=size))
    assert b"".join(p.read() for p in pieces) == data
    for p in pieces:
        assert p.read() == b"" or p.read().endswith(b"\n") or p is pieces[-1]
        before = b"".join(q.read() for q in pieces if q.start < p.start)
        assert p.first_line == before.count(b"\n") + 1


@pytest.fixture
def mixed(tmp_path):
    """A folder with every kind of input: JSONL (BOM, CRLF, broken lines), gzip and HAR."""
    folder = tmp_path / "logs"
    folder.mkdir()
    recs = [json.dumps(valid(received_at=1790812801 + i)) for i in range(40)]
    recs[5], recs[17] = "{broken", json.dumps(valid(subscription_id=""))
    text = "\n".join(recs) + "\n"
    (folder / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n", 3).encode())
    later = text.replace('"received_at": 17908128', '"received_at": 17908130')  # 200 s later
    later = later.replace("2026-10-01T00:00:05Z", "2026-10-01T00:00:06Z")  # other records
    later = later.replace("{broken", "{broken later")  # a torn line is known by its bytes
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(later.encode()))
    rec = valid()
    har = {
        "log": {
            "entries": [
                {
                    "startedDateTime": "2026-10-01T00:00:10Z",
                    "request": {
                        "headers": [{"name": k, "value": v} for k, v in rec["headers"].items()],
                        "postData": {"text": rec["body"]},
                    },
                }
            ]
        }
    }
    (folder / "c.har").write_text(json.dumps(har))
    secrets = tmp_path / "s.json"
    secrets.write_text(json.dumps({"wh_1": [{"secret": SECRET}]}))
    return folder, secrets


@pytest.mark.parametrize(("workers", "piece_bytes"), [(1, None), (2, 500), (2, 10**6)])
def test_verify_logs_equals_the_loader(mixed, workers, piece_bytes):
    folder, secrets = mixed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = audit_signatures([folder], secrets).deliveries[VERDICT_COLUMNS]
    got = verify_logs([folder], secrets, workers=workers, piece_bytes=piece_bytes)
    assert set(got["verdict"].dropna()) == {"valid", "unreadable"}
    pd.testing.assert_frame_equal(got, expected)


def test_parallel_ingest_equals_the_loader(mixed, tmp_path):
    folder, secrets = mixed
    r = ingest([folder], secrets, tmp_path / "store", chunk_bytes=700, workers=2)
    assert r.records == 81
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = audit_signatures([folder], secrets).deliveries[VERDICT_COLUMNS]
    got = load_deliveries(tmp_path / "store", columns=VERDICT_COLUMNS)[VERDICT_COLUMNS]
    pd.testing.assert_frame_equal(got, expected)


def test_a_failure_between_results_leaves_no_pool_nor_lock_behind(mixed, monkeypatch):
    """A ^C (or any error) in the caller's loop over the results, while the generator of
    results waits at a yield, with the traceback kept alive (IPython keeps the last one in
    ``sys.last_traceback``): the workers are stopped and the next verification runs. The
    generator used to keep the module's lock and its pool until it was collected, so the
    next call in that process (a notebook's next cell) waited for ever."""
    import multiprocessing
    import threading

    from audit.ingest import parallel, verdicts

    folder, secrets = mixed
    calls = []
    before = set(multiprocessing.active_children())  # another test's, if any: not ours

    def interrupted(self):
        calls.append(1)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(verdicts._Hashes, "start", interrupted)
        try:
            verify_logs([folder], secrets, workers=2, piece_bytes=500)
        except KeyboardInterrupt as e:
            kept = e.__traceback__  # what IPython keeps: every frame of the failed call
    try:
        assert calls and kept is not None
        assert not parallel._LOCK.locked()
        alive = [p for p in multiprocessing.active_children() if p.is_alive() and p not in before]
        assert not alive
        got = []
        again = threading.Thread(
            target=lambda: got.append(verify_logs([folder], secrets, workers=2)), daemon=True
        )
        again.start()
        again.join(timeout=60)
        assert not again.is_alive(), "the next verification waited for the abandoned one"
        assert (got[0]["verdict"] == "valid").sum() == 79
    finally:  # broken or not, what the traceback holds goes: later tests never wait on it
        kept = None
        gc.collect()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_generator_of_results_left_unclosed_holds_no_lock(mixed, workers):
    """A caller that stops reading the results and keeps the generator (unclosed) does not
    block the next verification: the lock is held only while the workers are forked, or
    while one piece is done in process, never at a yield."""
    from audit.ingest import parallel
    from audit.ingest.secrets import read_secrets

    folder, secrets = mixed
    path = folder / "a.jsonl"
    kw = {
        "sources": {str(path): str(path)},
        "wanted": {v: k for k, v in header_names("X-PhishFort").items()},
        "secrets": read_secrets(secrets),
        "tolerance_s": 300.0,
        "workers": workers,
        "extra": {"names": list(VERDICT_COLUMNS)},
    }
    left = parallel.map_pieces(
        parallel.verdict_batch, parallel.plan_pieces(path, piece_bytes=500), **kw
    )
    try:
        next(left)  # then left waiting at a yield
        assert not parallel._LOCK.locked()
        pieces = parallel.plan_pieces(path, piece_bytes=500)
        with contextlib.closing(parallel.map_pieces(parallel.verdict_batch, pieces, **kw)) as again:
            rows = sum(table.num_rows for _, (table, *_rest) in again)
        assert rows == 40
    finally:
        left.close()
