"""`audit simulate` streams what it writes (issue 38, point 6): the requests are spilled as they
are made and written out one day at a time, so memory holds one day, never the whole month.

The known answer for the bytes is the simulator's own output with its default chunk (at this
size, each day's requests are spilled in one piece) against the same run spilling each request on
its own (a chunk of one): a writer that depended on holding a day, or the month, in one piece
would differ. The bytes themselves are pinned in tests/test_demo.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from audit.demo import simulate
from audit.demo.write import CaptureSpill
from audit.progress import Progress

ARGS = {"seed": 5, "days": 8, "incidents": 30}


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def test_the_captures_are_written_one_day_at_a_time(tmp_path: Path, monkeypatch) -> None:
    days: list[int] = []
    read = CaptureSpill.records

    def counted(self: CaptureSpill, day: str) -> list:
        out = read(self, day)
        days.append(len(out))
        return out

    monkeypatch.setattr(CaptureSpill, "records", counted)
    r = simulate(tmp_path / "o", **ARGS)
    truth = json.loads(r.truth.read_text(encoding="utf-8"))
    probe = [u["file"] for u in truth["unreadable_lines"] if "delivery_id" not in u]
    lines = [len(p.read_bytes().splitlines()) for p in r.captures]
    requests = [
        n - probe.count(f"captures/{p.name}") for n, p in zip(lines, r.captures, strict=True)
    ]
    assert days == requests  # each read holds one file's requests, in the files' order
    assert len(days) >= 8 and sum(days) == r.records - 1  # every request once (not the probe)
    assert not any(p.name.startswith(".simulate-") for p in (tmp_path / "o").iterdir())


def test_a_chunk_of_one_request_gives_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    simulate(tmp_path / "a", **ARGS)
    monkeypatch.setattr(CaptureSpill, "CHUNK", 1)
    simulate(tmp_path / "b", **ARGS)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")


def test_a_failure_leaves_no_scratch_files(tmp_path: Path, monkeypatch) -> None:
    def boom(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(CaptureSpill, "write", boom)
    with pytest.raises(OSError, match="disk full"):
        simulate(tmp_path / "o", **ARGS)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its private work folder


class _Ticks(Progress):
    """Counts the calls to ``changed`` before the first request is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.before_first = 0

    def changed(self) -> None:
        self.before_first += self.records == 0


def test_progress_is_told_while_the_incidents_are_made(tmp_path: Path) -> None:
    # A million-delivery month spends tens of seconds making its incidents before the first
    # request is counted: the terminal's line is redrawn meanwhile (every 100 incidents).
    p = _Ticks()
    simulate(tmp_path / "o", seed=5, days=8, incidents=250, progress=p)
    assert p.before_first == 3  # incidents 0, 100 and 200
