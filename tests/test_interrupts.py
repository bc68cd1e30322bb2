"""A ^C (sent to the whole process group) while the command line loads, or while the verifying
workers are forked or wait for work, ends in one line, not in a traceback of a worker or an
import (audit.console, audit.ingest.load.fork_pool, audit.interrupts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from audit.ingest.load import fork_pool

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


def _workers_gone(pool) -> bool:
    deadline = time.monotonic() + 10
    procs = list(pool._processes.values())
    while time.monotonic() < deadline:
        if all(p.exitcode is not None for p in procs):
            return True
        time.sleep(0.05)
    return False


def test_the_script_runs_the_entry_point_that_catches_a_ctrl_c_while_loading():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["scripts"]
    assert scripts["audit"] == "audit.console:main"


def test_a_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_3():
    # The ^C lands in the import of the command line (0.2-0.3 s of a run): before, Python's
    # traceback of that import, exit 130.
    code = (
        "import sys\n"
        "class Interrupting:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'audit.cli.main':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupting)\n"
        "from audit.console import main\n"
        "sys.exit(main(['--version']))\n"
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
def test_a_ctrl_c_landing_in_a_worker_as_it_is_forked_ends_it_quietly(capfd):
    _AT_FORK[0] = "child"
    try:
        pool = fork_pool(2)
    finally:
        _AT_FORK[0] = ""
    try:
        assert len(pool._processes) == 2  # forked at once
        assert _workers_gone(pool)  # each ended in its start-up, without a word
        # 1: the worker ended itself; -SIGTERM: the pool's manager stopped the other once the
        # first was gone
        assert {p.exitcode for p in pool._processes.values()} <= {1, -signal.SIGTERM}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    assert capfd.readouterr().err == ""


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
def test_a_ctrl_c_reaching_an_idle_worker_ends_it_quietly(capfd):
    pool = fork_pool(2)
    try:
        assert pool.submit(int, "7").result(timeout=30) == 7  # started, now waiting for work
        for pid in list(pool._processes):
            os.kill(pid, signal.SIGINT)
        assert _workers_gone(pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    assert capfd.readouterr().err == ""  # before: multiprocessing's traceback from each


@needs_fork
def test_a_worker_of_a_caller_that_ignores_ctrl_c_ignores_it_too():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup
    try:
        pool = fork_pool(2)
        try:
            assert pool.submit(int, "1").result(timeout=30) == 1
            for pid in list(pool._processes):
                os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            assert pool.submit(int, "2").result(timeout=30) == 2  # still working
        finally:
            pool.shutdown(wait=True)
    finally:
        signal.signal(signal.SIGINT, before)


def _own_handler(signum, frame) -> None:
    _STOP_ASKED.append(signum)


_STOP_ASKED: list[int] = []


@needs_fork
@pytest.mark.parametrize("handler", ["ignore", "own"])
def test_a_caller_that_does_not_raise_on_ctrl_c_keeps_its_workers_through_one(handler):
    """A caller that ignores ^C (a script's background job) or handles it its own way
    (finishing a batch first) keeps its workers: a ^C landing as they are forked, or later,
    does not end them (it broke the pool: BrokenProcessPool)."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN if handler == "ignore" else _own_handler)
    _AT_FORK[0] = "child"
    try:
        pool = fork_pool(2)
        _AT_FORK[0] = ""
        try:
            assert pool.submit(int, "1").result(timeout=30) == 1
            for pid in list(pool._processes):
                os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            assert [pool.submit(int, str(i)).result(timeout=30) for i in range(4)] == [0, 1, 2, 3]
        finally:
            pool.shutdown(wait=True)
    finally:
        _AT_FORK[0] = ""
        signal.signal(signal.SIGINT, before)


@needs_fork
def test_workers_forked_from_another_thread_of_a_caller_that_ignores_ctrl_c_ignore_it():
    import threading

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    got: list = []

    def work() -> None:
        pool = fork_pool(2)
        try:
            pool.submit(int, "1").result(timeout=30)
            for pid in list(pool._processes):
                os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            got.append(pool.submit(int, "2").result(timeout=30))
        finally:
            pool.shutdown(wait=True)

    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(60)
    finally:
        signal.signal(signal.SIGINT, before)
    assert got == [2]


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
    deadline = time.monotonic() + 10
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
    log = write_jsonl(tmp_path / "a.jsonl", [{"received_at": 1790812800, "headers": {}}])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_abcdefgh"}]})
    code = main(["verify", str(log), "--secrets", str(secrets), "--out", str(tmp_path / "v.pq")])
    err = capsys.readouterr().err
    assert code == 3
    assert err == (
        "audit: error: a worker process ended before its work was done (killed, or out of "
        "memory?); run again\n"
    )
