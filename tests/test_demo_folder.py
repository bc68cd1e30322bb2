"""The demo data's folder is made whole in a private folder and renamed into place (issue 44):
nothing can be planted in it while it is simulated, and it ends private (mode 0700). Before,
``audit simulate``, ``audit demo`` and ``audit.open``'s per-user demo folder wrote into the
target itself as it was made (the last after removing its private temporary folder and
making it again with the default mode)."""

from __future__ import annotations

import importlib
import os
import stat
import tempfile
from pathlib import Path

import pytest

from audit.demo.simulate import simulate
from audit.errors import InputError
from audit.report.explore import demo_inputs

ARGS = {"days": 7, "incidents": 20}
#: The module (``audit.demo.simulate`` is also the function, in ``audit.demo``).
simulate_module = importlib.import_module("audit.demo.simulate")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _during_simulation(monkeypatch, act) -> None:
    """Run ``act()`` while the demo data is being written (after the captures)."""
    write_snapshot = simulate_module.write_snapshot

    def hooked(folder, *args):
        act()
        return write_snapshot(folder, *args)

    monkeypatch.setattr(simulate_module, "write_snapshot", hooked)


def test_a_file_planted_in_the_folder_while_it_is_made_is_never_part_of_it(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    planted = out / "captures" / "receiver-2026-10-03.jsonl"

    def plant():
        if not planted.exists():
            planted.parent.mkdir(parents=True, exist_ok=True)  # an attacker's own folder
            planted.write_text('{"received_at": "2026-10-03T00:00:00Z"}\n')

    _during_simulation(monkeypatch, plant)
    with pytest.raises(InputError, match="the output folder must be empty or missing"):
        simulate(out, **ARGS)
    # Before: the demo data was written into `out` with the planted file among its captures.
    assert sorted(p.name for p in out.rglob("*")) == ["captures", planted.name]  # theirs only
    assert [p for p in tmp_path.iterdir() if p.name != "demo"] == []  # no work folder left


def test_the_folder_does_not_exist_until_it_is_whole_and_is_private(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    seen: list[tuple[bool, list[int]]] = []

    def look():
        work = [p for p in tmp_path.iterdir() if p.name.startswith(".demo.simulate-")]
        seen.append((out.exists(), [_mode(p) for p in work]))

    _during_simulation(monkeypatch, look)
    umask = os.umask(0o002)  # a permissive umask changes nothing
    try:
        result = simulate(out, **ARGS)
    finally:
        os.umask(umask)
    assert seen[0] == (False, [0o700])  # while it is made: no `out`, a private work folder
    assert _mode(out) == 0o700
    assert result.captures[0] == out / "captures" / "receiver-2026-10-02.jsonl"
    assert result.truth == out / "truth.json" and result.truth.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_an_empty_folder_given_is_replaced_whole(tmp_path):
    out = tmp_path / "demo"
    out.mkdir(mode=0o777)
    simulate(out, **ARGS)
    assert _mode(out) == 0o700 and (out / "secrets.json").is_file()


def test_a_link_given_as_the_folder_is_refused_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "demo").symlink_to(target)
    with pytest.raises(InputError, match="must be empty or missing"):
        simulate(tmp_path / "demo", **ARGS)
    assert list(target.iterdir()) == [] and (tmp_path / "demo").is_symlink()


def test_the_per_user_demo_folder_is_made_private_and_whole(tmp_path, monkeypatch):
    # Before: its temporary folder was removed and made again by the simulation, with the
    # default mode, in the shared temporary directory, and written into as it was made.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"audit-demo-seed7-{os.getuid()}"
    seen: list[tuple[bool, list[int]]] = []

    def look():
        work = [p for p in tmp_path.iterdir() if p.name != root.name]
        seen.append((root.exists(), [_mode(p) for p in work]))

    _during_simulation(monkeypatch, look)
    got = demo_inputs()
    assert got["logs"] == [str(root / "captures")]
    assert seen[0] == (False, [0o700])
    assert _mode(root) == 0o700
