"""Work beside the caller (audit.ingest.side): same result, warnings and errors as in-process."""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import signal
import threading
import time
import warnings

import pytest

from audit.errors import InputError
from audit.ingest.load import default_workers
from audit.ingest.side import aside, cancelled_on_error

needs_fork = pytest.mark.skipif(default_workers() < 2, reason="runs in the caller here")


@pytest.fixture(autouse=True)
def _no_thread_left_by_earlier_tests():
    """aside() refuses to fork beside another thread: a test that leaves one running (a server
    never stopped) would turn these tests into tests of the fallback."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not others, f"threads left running by earlier tests: {others}"


@needs_fork
def test_the_function_runs_in_another_process_and_its_result_comes_back():
    caller = os.getpid()
    got = aside(lambda: (os.getpid(), [1, 2, 3] * 2)).result()
    assert got[0] != caller
    assert got[1] == [1, 2, 3, 1, 2, 3]


@needs_fork
def test_the_childs_warnings_are_issued_in_the_caller():
    def warns():
        warnings.warn("three rows were odd", UserWarning, stacklevel=1)
        return os.getpid()

    pending = aside(warns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        child = pending.result()
    assert child != os.getpid()
    assert [(w.category, str(w.message)) for w in caught] == [(UserWarning, "three rows were odd")]


@needs_fork
def test_an_error_in_the_child_is_met_again_in_the_caller(tmp_path):
    ran = tmp_path / "ran"

    def fails():
        with open(ran, "a") as f:
            f.write(f"{os.getpid()}\n")
        raise InputError("a store part cannot be read: truncated")

    pending = aside(fails)
    with pytest.raises(InputError, match=r"^a store part cannot be read: truncated$"):
        pending.result()
    pids = [int(p) for p in ran.read_text().split()]
    assert len(pids) == 2 and pids[1] == os.getpid() != pids[0]  # the child, then the caller


@needs_fork
def test_a_killed_child_leaves_the_work_to_the_caller():
    caller = os.getpid()

    def dies_in_the_child():
        if os.getpid() != caller:
            os.kill(os.getpid(), signal.SIGKILL)
        return "done here"

    assert aside(dies_in_the_child).result() == "done here"


@needs_fork
def test_a_result_that_cannot_be_sent_is_computed_in_the_caller():
    caller = os.getpid()
    got = aside(lambda: (os.getpid(), lambda: None)).result()  # a lambda cannot be pickled
    assert got[0] == caller


@needs_fork
def test_a_result_is_taken_once():
    pending = aside(lambda: 1)
    assert pending.result() == 1
    with pytest.raises(RuntimeError, match="already taken"):
        pending.result()


def _slow_child(tmp_path):
    """A pending result whose child sleeps for a minute, and the child's pid once it runs."""
    pid_file = tmp_path / "pid"

    def slow():
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    pending = aside(slow)
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text():
            return pending, int(pid_file.read_text())
        time.sleep(0.01)
    raise AssertionError("the child did not start")


@needs_fork
def test_a_result_never_taken_stops_its_child(tmp_path):
    pending, child = _slow_child(tmp_path)
    del pending
    gc.collect()
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(child, 0)


@needs_fork
def test_a_block_that_fails_cancels_the_child(tmp_path):
    pending, child = _slow_child(tmp_path)
    with pytest.raises(KeyboardInterrupt), cancelled_on_error(pending):
        raise KeyboardInterrupt
    with pytest.raises(ProcessLookupError):  # stopped and reaped while the object lives on
        os.kill(child, 0)
    with pytest.raises(RuntimeError, match="cancelled"):
        pending.result()


@needs_fork
def test_no_fork_while_another_thread_runs():
    """A lock another thread holds at the fork (an import, a library's start-up) would be held
    for ever in the child: found in review, three threads calling analyze(store=...) hung."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert aside(os.getpid) is None
    finally:
        stop.set()
        other.join()
    pending = aside(os.getpid)
    assert pending is not None and pending.result() != os.getpid()


def _in_a_pool_worker(_: int) -> bool:
    return aside(os.getpid) is None


@needs_fork
def test_no_fork_in_a_daemonic_worker():
    """Found in review: analyze(store=...) in a multiprocessing.Pool worker failed with
    "daemonic processes are not allowed to have children"."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(_in_a_pool_worker, [0]) == [True]


@needs_fork
def test_a_fork_that_fails_leaves_the_work_to_the_caller(monkeypatch):
    """Found in review: a fork refused (ENOMEM under strict overcommit, a pids limit) ended
    the report with "Cannot allocate memory"."""

    def refused():
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", refused)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        assert aside(os.getpid) is None
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor left open (review)


@needs_fork
def test_python_s_warning_at_a_fork_beside_library_threads_is_not_the_callers(monkeypatch):
    """Found in review: Python 3.12+ warns at a fork when the process runs threads of its
    libraries (the kernel client's ZMQ threads); a report records its warnings as notes, so
    each forked run had a note with a pid in it. (On 3.11 the fork is made to warn alike.)"""
    real = os.fork

    def forks_as_on_3_12():
        warnings.warn(
            f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to "
            "deadlocks in the child.",
            DeprecationWarning,
            stacklevel=2,
        )
        return real()

    monkeypatch.setattr(os, "fork", forks_as_on_3_12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert aside(lambda: 7).result() == 7
        warnings.warn("the caller's own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["the caller's own"]


def _warn_three_times() -> int:
    for _ in range(3):
        warnings.warn("a small sample", UserWarning, stacklevel=1)
    return os.getpid()


@needs_fork
def test_the_childs_warnings_meet_the_callers_filters_as_if_issued_here():
    """Found in review: a filter by module did not apply to the child's warnings, and a
    warning shown once per place ("default") was shown once per issue."""
    pending = aside(_warn_three_times)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        assert pending.result() != os.getpid()
    assert [str(w.message) for w in caught] == ["a small sample"]
    pending = aside(_warn_three_times)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=UserWarning, module=__name__)
        pending.result()
    assert caught == []


@needs_fork
def test_the_child_is_the_out_of_memory_killers_first_pick():
    """Found in review: the parent, larger, would be killed first, and the run with it; the
    child killed instead only means the caller does the work."""

    def score() -> tuple[int, str]:
        with open("/proc/self/oom_score_adj") as f:
            return os.getpid(), f.read().strip()

    child, adj = aside(score).result()
    assert child != os.getpid() and adj == "1000"
    assert score()[1] != "1000"


@needs_fork
def test_an_interrupt_while_waiting_for_the_result_stops_the_child(tmp_path):
    pending, child = _slow_child(tmp_path)

    def interrupt(*_):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)  # a ^C while result() waits for the child
    try:
        with pytest.raises(KeyboardInterrupt):
            pending.result()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    with pytest.raises(ProcessLookupError):  # stopped and reaped while the object lives on
        os.kill(child, 0)


#: Set by a test: every forked child then gets a SIGINT while Python runs its after-fork hooks.
_SIGINT_AT_FORK = [False]


def _sigint_in_child() -> None:
    if _SIGINT_AT_FORK[0]:
        os.kill(os.getpid(), signal.SIGINT)


os.register_at_fork(after_in_child=_sigint_in_child)


@needs_fork
def test_a_ctrl_c_during_the_fork_is_quiet_in_the_child(capfd):
    """A ^C reaches the whole process group: when it lands while the child is being made,
    Python printed "Exception ignored in ... _after_fork" there. Held off until the child runs
    its work, it only ends the child, and the caller does the work."""
    _SIGINT_AT_FORK[0] = True
    try:
        pending = aside(lambda: os.getpid())
    finally:
        _SIGINT_AT_FORK[0] = False
    assert pending is not None
    assert pending.result() == os.getpid()  # the child was interrupted: done here
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "KeyboardInterrupt" not in err, err


@needs_fork
def test_a_ctrl_c_during_the_fork_stops_the_child_and_reaches_the_caller(monkeypatch):
    """The caller's own ^C, held off during the fork, is raised once it is made, and the child
    (not yet handed to anyone) is stopped and reaped."""
    import audit.ingest.side as side

    forked = []

    def fork():
        os.kill(os.getpid(), signal.SIGINT)  # lands during the fork (held off there)
        pid = real_fork()
        if pid == 0:  # the child, never interrupted: it would run for a minute
            time.sleep(60)
            os._exit(0)
        forked.append(pid)
        return pid

    real_fork = os.fork
    monkeypatch.setattr(side.os, "fork", fork)
    with pytest.raises(KeyboardInterrupt):
        aside(lambda: 1)
    (pid,) = forked
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already
