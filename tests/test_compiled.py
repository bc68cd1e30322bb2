"""The rules' SQL kept on disk between processes (audit.analysis.compiled)."""

from __future__ import annotations

import os

import pytest

from audit.analysis import compiled


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(compiled.SWITCH, raising=False)
    return tmp_path / "cache" / "sql"


def _counting(text: str, calls: list[int]):
    def compile_sql() -> str:
        calls.append(1)
        return text

    return compile_sql


def test_a_rule_is_compiled_once_then_read_and_its_file_is_private(folder):
    calls: list[int] = []
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert len(calls) == 1
    (kept,) = folder.glob("*.sql")
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert compiled.kept("rule|b", _counting("SELECT 2", calls)) == "SELECT 2"  # another key
    assert len(calls) == 2 and len(list(folder.glob("*.sql"))) == 2


def test_a_file_others_may_write_is_never_read(folder):
    calls: list[int] = []
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    (kept,) = folder.glob("*.sql")
    kept.write_text("SELECT 'planted'")
    kept.chmod(0o666)
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert len(calls) == 2
    assert oct(kept.stat().st_mode & 0o777) == "0o600"  # kept again, privately


def test_a_link_is_never_followed(folder, tmp_path):
    calls: list[int] = []
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    (kept,) = folder.glob("*.sql")
    elsewhere = tmp_path / "elsewhere.sql"
    elsewhere.write_text("SELECT 'planted'")
    elsewhere.chmod(0o600)
    kept.unlink()
    kept.symlink_to(elsewhere)
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert elsewhere.read_text() == "SELECT 'planted'"  # replaced, not written through


def test_the_switch_turns_the_files_off(folder, monkeypatch):
    monkeypatch.setenv(compiled.SWITCH, "off")
    calls: list[int] = []
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    assert len(calls) == 2 and not folder.exists()


def test_a_folder_that_cannot_be_written_keeps_nothing_and_fails_nothing(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("AUDIT_CACHE_DIR", str(blocked))
    calls: list[int] = []
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert compiled.kept("rule|a", _counting("SELECT 1", calls)) == "SELECT 1"
    assert len(calls) == 2


def test_the_key_changes_with_the_package_source(folder, monkeypatch):
    calls: list[int] = []
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    monkeypatch.setattr(compiled, "_code_key", lambda: "another release")
    compiled.kept("rule|a", _counting("SELECT 1", calls))
    assert len(calls) == 2 and len(list(folder.glob("*.sql"))) == 2


def test_the_cache_is_where_the_variables_say(monkeypatch, tmp_path):
    monkeypatch.delenv("AUDIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiled.cache_folder() == tmp_path / "xdg" / "audit" / "sql"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compiled.cache_folder() == tmp_path / "home" / ".cache" / "audit" / "sql"
    assert os.environ.get("AUDIT_CACHE_DIR") is None


def test_a_killed_runs_spill_folder_is_removed_by_the_next_rule(tmp_path, monkeypatch):
    """A rule's DuckDB spill folder is removed in its ``finally``; kill -9 skips that, so the
    next rule removes the folders of processes that are gone (and keeps a live one's)."""
    import subprocess
    import sys
    import tempfile

    import pyarrow as pa

    from audit.analysis import engine

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dead = tmp_path / f"audit-engine-{gone}-abc"
    live = tmp_path / f"audit-engine-{os.getpid()}-def"
    dead.mkdir()
    live.mkdir()

    def rule(t):
        return t

    engine.run(rule, {"t": pa.table({"a": [1]})})
    assert not dead.exists() and live.exists()
    assert [p.name for p in tmp_path.iterdir()] == [live.name]  # the rule's own folder: gone
