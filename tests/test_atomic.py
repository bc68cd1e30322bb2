"""Atomic writes: what a killed writer leaves behind is removed by the next write."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from audit.atomic import atomic_output, staged_files, write_text_atomic
from audit.errors import OutputError


def _dead_pid() -> int:
    """The id of a process that has ended (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _left(folder, name: str, pid: int, age_s: float) -> os.PathLike:
    path = folder / f".out.csv.{pid}.{name}.tmp"
    path.write_text("half a file")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


@pytest.mark.skipif(os.name != "posix", reason="the writer check is POSIX's signal 0")
def test_a_write_removes_what_killed_writers_left_and_nothing_else(tmp_path):
    dead = _dead_pid()
    stale = _left(tmp_path, "abcd1234", dead, age_s=3600)
    young = _left(tmp_path, "efgh5678", dead, age_s=0)  # may still be renamed by its writer
    live = _left(tmp_path, "ijkl9012", os.getppid(), age_s=3600)  # its writer still runs
    other = tmp_path / f".out.csv.backup.{dead}.mnop3456.tmp"  # another target's temporary
    other.write_text("x")
    os.utime(other, (time.time() - 3600,) * 2)
    mine = tmp_path / ".out.csv.note"  # not a temporary file at all
    mine.write_text("keep")

    write_text_atomic(tmp_path / "out.csv", "a,b\n")

    assert (tmp_path / "out.csv").read_text() == "a,b\n"
    assert not stale.exists()
    assert young.exists() and live.exists() and other.exists() and mine.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == sorted(
        [young.name, live.name, other.name]
    )  # the write's own temporary file was renamed, not left


def test_a_killed_writer_leaves_a_temporary_file_the_next_write_removes(tmp_path):
    """The real thing: a writer killed with SIGKILL halfway, then a second write."""
    code = (
        "import os, sys\n"
        "from audit.atomic import atomic_output\n"
        "with atomic_output(sys.argv[1]) as f:\n"
        "    f.write('half'); f.flush(); os.kill(os.getpid(), 9)\n"
    )
    target = tmp_path / "out.csv"
    done = subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert done.returncode == -9
    (left,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert not target.exists()
    os.utime(left, (time.time() - 120,) * 2)  # a minute and more ago
    write_text_atomic(target, "whole\n")
    assert target.read_text() == "whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_nested_write_failure_names_the_file_being_written_once(tmp_path):
    """Two files written together (a table written part by part): a full disk while writing
    the inner one is said once, of that file, and neither file nor temporary is left."""
    with pytest.raises(OutputError) as caught, atomic_output(tmp_path / "outer.txt") as outer:
        outer.write("a")
        with atomic_output(tmp_path / "inner.txt"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(caught.value) == (
        f"{tmp_path / 'inner.txt'}: cannot write (No space left on device); "
        "any previous file is left unchanged"
    )
    assert list(tmp_path.iterdir()) == []


def test_staged_files_replace_all_or_none(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.csv").write_text("old a")
    (out / "b.csv").write_text("old b")
    os.chmod(out / "a.csv", 0o600)
    failed = pytest.raises(OutputError, match=rf"^{out}/b\.csv: cannot write \(full\)")
    with failed, staged_files(out) as stage:
        write_text_atomic(stage / "a.csv", "new a")
        with atomic_output(stage / "b.csv") as f:
            f.write("half")
            raise OSError(errno.ENOSPC, "full")
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "b.csv"]
    assert (out / "a.csv").read_text() == "old a" and (out / "b.csv").read_text() == "old b"
    with staged_files(out) as stage:
        write_text_atomic(stage / "a.csv", "new a")
        write_text_atomic(stage / "c.csv", "new c")
        assert (out / "a.csv").read_text() == "old a"  # nothing replaced before the end
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "b.csv", "c.csv"]
    assert (out / "a.csv").read_text() == "new a" and (out / "c.csv").read_text() == "new c"
    assert (out / "a.csv").stat().st_mode & 0o777 == 0o600  # the file's permissions kept


def test_staged_files_write_beside_a_symlinks_target_and_keep_the_link(tmp_path):
    """A table linked to another disk is written on that disk, once (no copy from out)."""
    elsewhere = tmp_path / "disk2"
    elsewhere.mkdir()
    real = elsewhere / "t.csv"
    real.write_text("old")
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.csv").symlink_to(real)
    with staged_files(out) as stage:
        staged = stage / "t.csv"
        write_text_atomic(staged, "new")
        assert staged.parent == elsewhere and real.read_text() == "old"
    assert (out / "t.csv").is_symlink() and real.read_text() == "new"
    assert [p.name for p in out.iterdir()] == ["t.csv"]
    assert [p.name for p in elsewhere.iterdir()] == ["t.csv"]


def test_staged_files_check_every_target_before_replacing_any(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.csv", "c.csv"):
        (out / name).write_text("old")
    (out / "b.csv").mkdir()  # a folder where a table goes
    folder = pytest.raises(OutputError, match=rf"^{out}/b\.csv: is a folder; no file of the set")
    with folder, staged_files(out) as stage:
        for name in ("a.csv", "b.csv", "c.csv"):
            write_text_atomic(stage / name, "new")
    assert (out / "a.csv").read_text() == "old" and (out / "c.csv").read_text() == "old"
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "b.csv", "c.csv"]


def test_a_rename_that_fails_after_others_says_so(tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_replace = os.replace

    def second_fails(src, dst):
        if str(src).endswith(".staged") and os.fspath(dst).endswith("b.csv"):
            raise OSError(errno.EACCES, "Permission denied")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    said = pytest.raises(
        OutputError, match=r"b\.csv: cannot write \(Permission denied\); 1 of the 3"
    )
    with said, staged_files(out) as stage:
        for name in ("a.csv", "b.csv", "c.csv"):
            write_text_atomic(stage / name, name)
    assert sorted(p.name for p in out.iterdir()) == ["a.csv"]  # no staged file left


@pytest.mark.skipif(os.name != "posix", reason="the writer check is POSIX's signal 0")
def test_staged_files_remove_what_killed_writers_left(tmp_path):
    dead = _dead_pid()
    left = {}
    for name, pid, age, random in [
        ("stale", dead, 3600, "0000aaaa"),
        ("young", dead, 0, "1111bbbb"),
        ("live", os.getppid(), 3600, "2222cccc"),
        ("reused", os.getpid(), 3600, "3333dddd"),  # our number, not our file: a container's 1
        ("user's", 20240101, 3600, "4444eeee"),  # not a process id (over pid_max)
        ("user's too", dead, 3600, "orig"),  # not a random part of ours
    ]:
        left[name] = tmp_path / f".x.csv.{pid}.{random}.staged"
        left[name].write_text("half")
        os.utime(left[name], (time.time() - age,) * 2)
    # killed while writing a staged file: the temporary file of the staged one
    left["half"] = tmp_path / f"..x.csv.{dead}.ab12cd34.staged.{dead}.k_9zq1w2.tmp"
    left["half"].write_text("half")
    os.utime(left["half"], (time.time() - 3600,) * 2)
    user = tmp_path / ".staged.20240101.backup"  # the user's, whatever its name looks like
    user.mkdir()
    os.utime(user, (time.time() - 3600,) * 2)
    with staged_files(tmp_path) as stage:
        write_text_atomic(stage / "x.csv", "x")
    assert not left["stale"].exists() and not left["reused"].exists()
    assert not left["half"].exists()
    assert left["young"].exists() and left["live"].exists() and user.exists()
    assert left["user's"].exists() and left["user's too"].exists()
    assert (tmp_path / "x.csv").read_text() == "x"


def test_a_staged_file_removed_before_the_commit_fails_the_set(tmp_path):
    """Another run's clean-up (another PID namespace) removed one: no file is replaced, and the
    run does not say it wrote it."""
    (tmp_path / "a.csv").write_text("old a")
    (tmp_path / "b.csv").write_text("old b")
    removed = pytest.raises(OutputError, match=r"b\.csv: its new version was removed")
    with removed, staged_files(tmp_path) as stage:
        write_text_atomic(stage / "a.csv", "new a")
        staged = stage / "b.csv"
        write_text_atomic(staged, "new b")
        staged.unlink()
    assert (tmp_path / "a.csv").read_text() == "old a" and (
        tmp_path / "b.csv"
    ).read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]
    never = pytest.raises(OutputError, match=r"c\.csv: was not written; no file of the set")
    with never, staged_files(tmp_path) as stage:
        write_text_atomic(stage / "a.csv", "new a")
        stage / "c.csv"  # asked for, never written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]


def test_a_staged_file_has_its_targets_permissions_while_it_is_written(tmp_path):
    (tmp_path / "secret.csv").write_text("old")
    os.chmod(tmp_path / "secret.csv", 0o600)
    with staged_files(tmp_path) as stage:
        staged = stage / "secret.csv"
        assert staged.stat().st_mode & 0o777 == 0o600  # before a byte is written
        with atomic_output(staged) as f:
            f.write("new")
        assert staged.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "secret.csv").stat().st_mode & 0o777 == 0o600


def test_a_table_that_is_a_folder_or_a_link_loop_is_one_clear_error(tmp_path):
    (tmp_path / "root.csv").symlink_to("/")
    (tmp_path / "loop.csv").symlink_to(tmp_path / "loop.csv")
    for name, said in [("root.csv", "is a folder"), ("loop.csv", "symbolic link loop")]:
        with (
            pytest.raises(OutputError, match=rf"{name}: .*{said}"),
            staged_files(tmp_path) as stage,
        ):
            write_text_atomic(stage / name, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.csv", "root.csv"]


def test_a_commit_waits_for_another_run_committing_into_the_folder(tmp_path):
    """Two runs' sets never interleave: while the folder is locked (another run renaming), a
    commit renames nothing; once the lock is released it replaces the set whole."""
    import threading

    from audit.locks import folder_held

    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.csv", "b.csv"):
        (out / name).write_text("old\n")
    holding, release = threading.Event(), threading.Event()

    def other_run():
        with folder_held(out):
            holding.set()
            release.wait(10)

    other = threading.Thread(target=other_run)
    other.start()
    holding.wait(10)
    done = threading.Event()

    def this_run():
        with staged_files(out) as stage:
            for name in ("a.csv", "b.csv"):
                write_text_atomic(stage / name, "new\n")
        done.set()

    mine = threading.Thread(target=this_run)
    mine.start()
    assert not done.wait(0.5)  # waiting for the lock
    assert [(out / n).read_text() for n in ("a.csv", "b.csv")] == ["old\n", "old\n"]
    release.set()
    other.join(10)
    mine.join(10)
    assert done.is_set()
    assert [(out / n).read_text() for n in ("a.csv", "b.csv")] == ["new\n", "new\n"]
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "b.csv"]  # no lock file left


def test_a_folder_that_cannot_be_locked_still_gets_its_set(tmp_path, monkeypatch):
    """A folder that may be written but not listed cannot be opened to be locked, and NFS
    refuses flock on folders: the set is committed without the lock, as before locks."""
    import fcntl

    from audit.locks import folder_held

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.csv").write_text("old\n")
    real_open = os.open

    def no_listing(path, flags, *a):
        if os.fspath(path) == os.fspath(out) and flags & getattr(os, "O_DIRECTORY", 0):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *a)

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    for name, fake in (("open", no_listing), ("flock", no_locks)):
        with monkeypatch.context() as m:
            m.setattr(os if name == "open" else fcntl, name, fake)
            with folder_held(out) as locked:
                assert locked is False
            with staged_files(out) as stage:
                write_text_atomic(stage / "a.csv", f"new {name}\n")
        assert (out / "a.csv").read_text() == f"new {name}\n"
    with folder_held(out) as locked:
        assert locked is True
