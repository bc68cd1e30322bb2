"""A ^C (sent to the whole process group) while the command line loads, or while the verifying
workers are forked or wait for work, ends in one line, not in a traceback of a worker or an
import (audit.console, audit.ingest.workers.fork_pool, audit.interrupts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from audit.ingest.workers import fork_pool

ROOT = Path(__file__).parents[1]
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")

#: Set to "child" or "parent": a SIGINT lands in that process right after the next fork.
_AT_FORK = [""]


def _in_child() -> None:
    if _AT_FORK[0] == "child":
        os.kill(os.getpid(), signal.SIGINT)


def _in_parent() -> None:
    if _AT_FORK[0] == "parent":
        os.kill(os.getpid(), signal.SIGINT)


os.register_at_fork(after_in_child=_in_child, after_in_parent=_in_parent)

#: Seconds after which a thread a test left is taken for hung: a guard, never a bound on speed.
HANG_S = 120


@pytest.fixture(autouse=True)
def _threads_ended():
    """A pool stopped while its workers start (``fork_pool`` interrupted) leaves its manager
    thread to end on its own: on a busy machine it still ran when a later test began
    (``tests/test_side.py``, which may only fork beside no other thread, then errored). Each
    test ends once the threads it started have."""
    before = set(threading.enumerate())
    yield
    hung = time.monotonic() + HANG_S
    while left := set(threading.enumerate()) - before:  # one may be starting another
        assert time.monotonic() < hung, f"still running {HANG_S} s after the test: {left}"
        for thread in left:
            if thread.is_alive():  # else starting (not joinable yet), or just ended
                thread.join(max(0.0, hung - time.monotonic()))
        time.sleep(0.01)


def _workers_gone(pool) -> bool:
    deadline = time.monotonic() + HANG_S
    procs = list(pool._processes.values())
    while time.monotonic() < deadline:
        if all(p.exitcode is not None for p in procs):
            return True
        time.sleep(0.05)
    return False


def test_the_script_runs_the_entry_point_that_catches_a_ctrl_c_while_loading():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["scripts"]
    assert scripts["audit"] == "audit.console:script"  # main(), then a quick end


def test_a_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_3():
    # The ^C lands in the import of the command's module (most of a short run's start-up):
    # before, Python's traceback of that import, exit 130.
    code = (
        "import sys\n"
        "class Interrupting:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'audit.cli.data':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting)\n"
        "from audit.console import main\n"
        "sys.exit(main(['verify', '--help']))\n"
    )
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert (got.returncode, got.stderr, got.stdout) == (3, "audit: aborted\n", "")


def test_the_entry_point_runs_the_command_line():
    got = subprocess.run(
        [sys.executable, "-c", "import sys; from audit.console import main; sys.exit(main())",
         "--version"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert got.returncode == 0 and got.stdout.startswith("audit, version ")


@needs_fork
def test_a_ctrl_c_landing_in_a_worker_as_it_is_forked_is_ignored_quietly(capfd):
    _AT_FORK[0] = "child"
    try:
        pool = fork_pool(2)
    finally:
        _AT_FORK[0] = ""
    try:
        assert len(pool._processes) == 2  # forked at once
        assert [pool.submit(int, str(i)).result(timeout=HANG_S) for i in range(4)] == [0, 1, 2, 3]
    finally:
        pool.shutdown(wait=True)
    assert capfd.readouterr().err == ""  # before: multiprocessing's traceback, or "ignored"


@needs_fork
def test_a_ctrl_c_of_the_caller_while_the_workers_are_forked_reaches_it_after(capfd):
    _AT_FORK[0] = "parent"
    try:
        with pytest.raises(KeyboardInterrupt):
            fork_pool(2)
    finally:
        _AT_FORK[0] = ""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    assert "Traceback" not in capfd.readouterr().err


@needs_fork
@pytest.mark.parametrize("handler", ["default", "ignore", "own"])
def test_a_ctrl_c_reaching_the_workers_is_left_to_the_caller(handler, capfd):
    """Whatever the caller does with ^C (raise, ignore it as a script's background job does,
    finish a batch first), the workers ignore it: an idle one printed multiprocessing's
    traceback, and one that ended on it broke the pool."""
    before = signal.signal(
        signal.SIGINT,
        {"default": signal.default_int_handler, "ignore": signal.SIG_IGN, "own": _own}[handler],
    )
    try:
        pool = fork_pool(2)
        try:
            assert pool.submit(int, "1").result(timeout=HANG_S) == 1
            for pid in list(pool._processes):
                os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            got = [pool.submit(int, str(i)).result(timeout=HANG_S) for i in range(4)]
            assert got == [0, 1, 2, 3]
        finally:
            pool.shutdown(wait=True)
    finally:
        signal.signal(signal.SIGINT, before)
    assert capfd.readouterr().err == ""


def _own(signum, frame) -> None:
    pass


@needs_fork
def test_a_caller_interrupted_cancels_the_tasks_not_started():
    from audit.ingest.workers import forked_workers

    with pytest.raises(KeyboardInterrupt), forked_workers(2) as pool:
        futures = [pool.submit(time.sleep, 0.3) for _ in range(20)]  # 3 s of work
        futures[0].result(timeout=HANG_S)
        workers = list(pool._processes.values())
        raise KeyboardInterrupt
    # The pieces held ended, not all twenty (the pool queues at most one more per worker).
    assert sum(f.cancelled() for f in futures) >= 10
    assert all(w.exitcode is not None for w in workers)  # ended, none left behind


_LARGE_RESULTS = """
import os, signal, sys, threading, time
from audit.ingest.workers import forked_workers
stop = threading.Event()
def pester(pids):
    while not stop.is_set():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        time.sleep(0.0005)
with forked_workers(2) as pool:
    pool.submit(int).result()
    t = threading.Thread(target=pester, args=(list(pool._processes),))
    t.start()
    sizes = [len(f.result()) for f in [pool.submit(bytes, 20_000_000) for _ in range(12)]]
    stop.set()
    t.join()
print(sizes == [20_000_000] * 12)
"""


@needs_fork
def test_workers_pestered_with_ctrl_c_send_every_large_result_whole():
    """A worker that ended on ^C half way through sending a result left the pool's manager
    thread waiting for the rest for ever, and the command with it (found by hand: `audit
    verify` hung at 0.6 s after a ^C, 2 times in 11)."""
    got = subprocess.run(
        [sys.executable, "-c", _LARGE_RESULTS], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert (got.stdout, got.stderr) == ("True\n", "")


@needs_fork
def test_a_fork_refused_half_way_leaves_no_worker_behind(monkeypatch):
    import multiprocessing.context

    real_start = multiprocessing.context.ForkProcess._Popen
    started = []

    def second_fails(process_obj):
        if started:
            raise OSError(11, "Resource temporarily unavailable")
        started.append(process_obj)
        return real_start(process_obj)

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "_Popen", staticmethod(second_fails))
    with pytest.raises(OSError):
        fork_pool(2)
    deadline = time.monotonic() + HANG_S
    while started[0].is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not started[0].is_alive()  # before: left running, and the interpreter hung at exit


def test_a_worker_that_died_is_one_line_not_an_internal_error(tmp_path, monkeypatch, capsys):
    """A worker killed (the out-of-memory killer, a signal sent to it alone) breaks the pool:
    the command says so in one line, exit 3, where it said "internal error"."""
    from concurrent.futures.process import BrokenProcessPool

    import audit.cli.data
    from audit.cli.main import main
    from tests.builders import write_jsonl, write_secrets

    def broken(*args, **kwargs):
        raise BrokenProcessPool("A child process terminated abruptly")

    monkeypatch.setattr(audit.cli.data, "verdict_table", broken, raising=False)
    monkeypatch.setattr("audit.ingest.verdicts.verdict_table", broken)
    log = write_jsonl(
        tmp_path / "a.jsonl", [{"received_at": 1790812800, "headers": {}, "body": "{}"}]
    )
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_abcdefgh"}]})
    code = main(["verify", str(log), "--secrets", str(secrets), "--out", str(tmp_path / "v.pq")])
    err = capsys.readouterr().err
    assert code == 3
    assert err == (
        "audit: error: a worker process ended before its work was done (killed, or out of "
        "memory?); run again\n"
    )


_TWICE = """
import os, signal, threading, time
from audit.ingest.workers import forked_workers
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # the second ^C
try:
    with forked_workers(2) as pool:
        fs = [pool.submit(time.sleep, 1) for _ in range(6)]
        time.sleep(0.1)
        raise KeyboardInterrupt  # the first ^C
except KeyboardInterrupt:
    print("aborted", flush=True)
"""


@needs_fork
def test_a_second_ctrl_c_while_the_held_pieces_end_does_not_hang_the_exit():
    """Found in review: a second ^C interrupting the wait for the pool left its manager thread
    half-stopped on Python 3.11-3.12, and the interpreter's exit waited for the workers for
    ever (`audit ingest`: 10 hangs in 10 runs with two ^Cs)."""
    try:
        got = subprocess.run(
            [sys.executable, "-c", _TWICE], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung after the second ^C")
    assert (got.returncode, got.stdout) == (0, "aborted\n")


@needs_fork
def test_a_ctrl_c_noted_before_a_fork_failed_reaches_the_caller(monkeypatch):
    forks = [0]
    real = os.fork

    def fork():
        forks[0] += 1
        if forks[0] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # noted while the workers are forked
            raise OSError(11, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(os, "fork", fork)
    with pytest.raises(KeyboardInterrupt):  # before: the OSError alone, the ^C lost
        fork_pool(3)
