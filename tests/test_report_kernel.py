"""The report's kernel: started ahead of the analyses (imports done, then moved into the run
folder), replaced when it died, shut down however the run ends; socket folders of killed runs
swept."""

from __future__ import annotations

import fcntl
import glob
import os
import subprocess
import sys
import tempfile
import time

import nbformat
import pytest

import audit.report.pipeline as pipeline
from audit.errors import ReportError
from audit.report import parse_period, run_report
from audit.report.kernel import WarmKernel, kernel_manager_class, sweep_kernel_folders
from audit.report.render import render
from tests.test_reports import hostile  # noqa: F401  (fixture)

#: Prints whether the report's modules were imported before the notebook's first cell, and
#: the kernel's working folder.
PROBE = (
    "import os, sys\n"
    "print('imports', 'warm' if 'audit.report.views' in sys.modules else 'cold', "
    "'cwd', os.getcwd())"
)


def _notebook(path):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell(PROBE),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, path)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def started(monkeypatch) -> list[tuple[int, str]]:
    """(pid, socket folder) of every warm kernel the pipeline starts."""
    got: list[tuple[int, str]] = []

    class Recorded(WarmKernel):
        def __init__(self):
            super().__init__()
            got.append((self.km.provisioner.pid, self.km._audit_folder))

    monkeypatch.setattr(pipeline, "WarmKernel", Recorded)
    return got


@pytest.mark.slow
def test_the_notebook_runs_on_the_kernel_started_before_the_analyses(
    hostile,  # noqa: F811
    tmp_path,
    started,
):
    logs, secrets = hostile
    result = run_report(
        [logs],
        secrets_path=secrets,
        period=parse_period("2026-10"),
        out_dir=tmp_path / "r",
        notebook=_notebook(tmp_path / "probe.ipynb"),
    )
    tmp = result.run_dir.with_name(f".tmp-{result.run_dir.name}")  # where it ran
    assert f"imports warm cwd {tmp}" in result.html.read_text()
    [(pid, folder)] = started
    assert not _alive(pid) and not os.path.exists(folder)  # shut down, sockets removed


@pytest.mark.slow
def test_a_dead_warm_kernel_is_replaced_by_a_fresh_one(tmp_path):
    kernel = WarmKernel()
    pid, folder = kernel.km.provisioner.pid, kernel.km._audit_folder
    os.kill(pid, 9)
    while _alive(pid):
        time.sleep(0.05)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    html = render(_notebook(tmp_path / "probe.ipynb"), run_dir, title="t", timeout_s=60,
                  kernel=kernel)  # fmt: skip
    assert f"imports cold cwd {run_dir}" in html.read_text()
    assert kernel.km is None and not os.path.exists(folder)


@pytest.mark.slow
def test_the_warm_kernel_is_shut_down_when_the_run_fails(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
    started,
):
    logs, secrets = hostile

    def compute(*_a, **_k):
        raise ReportError("the analyses failed")

    monkeypatch.setattr(pipeline, "compute", compute)
    with pytest.raises(ReportError, match="the analyses failed"):
        run_report([logs], secrets_path=secrets, period=parse_period("2026-10"),
                   out_dir=tmp_path / "r")  # fmt: skip
    [(pid, folder)] = started
    assert not _alive(pid) and not os.path.exists(folder)


def test_socket_folders_of_killed_runs_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    old = time.time() - 3600
    made = {}
    names = (
        f"audit-kernel-{dead}-old",
        f"audit-kernel-{dead}-young",
        f"audit-kernel-{os.getpid()}-live",
        "audit-kernel-x-odd",
        f"other-{dead}-old",
    )
    for name in names:
        p = tmp_path / name
        p.mkdir()
        (p / "kernel.json").write_text("{}")
        made[name] = p
        if not name.endswith("young"):
            os.utime(p, (old, old))
    (tmp_path / f"audit-kernel-{dead}-file").write_text("not a folder")
    os.utime(tmp_path / f"audit-kernel-{dead}-file", (old, old))
    gone = sweep_kernel_folders(str(tmp_path))
    assert gone == [made[f"audit-kernel-{dead}-old"]]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted({*made, f"audit-kernel-{dead}-file"} - {f"audit-kernel-{dead}-old"})


@pytest.mark.slow
def test_ctrl_c_while_the_warm_kernel_is_taken_shuts_it_down(tmp_path, monkeypatch):
    from jupyter_client.asynchronous import AsyncKernelClient

    kernel = WarmKernel()
    pid, folder = kernel.km.provisioner.pid, kernel.km._audit_folder

    async def interrupted(self, timeout=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(AsyncKernelClient, "get_shell_msg", interrupted)
    with pytest.raises(KeyboardInterrupt):
        kernel.take(tmp_path, 30)
    assert kernel.km is None and not _alive(pid) and not os.path.exists(folder)


@pytest.mark.slow
def test_a_warm_kernel_that_dies_before_it_answers_is_given_up_at_once(tmp_path, monkeypatch):
    """The kernel is found alive, then dies before it answers the move into the run folder:
    it is given up within seconds (and rendering starts a fresh one), not after the timeout."""
    kernel = WarmKernel()
    km = kernel.km
    pid, folder = km.provisioner.pid, km._audit_folder
    real = type(km).is_alive
    asked = []

    async def alive_then_real(self):
        asked.append(1)
        return True if len(asked) == 1 else await real(self)

    monkeypatch.setattr(type(km), "is_alive", alive_then_real)
    os.kill(pid, 9)
    while _alive(pid):
        time.sleep(0.05)
    started = time.monotonic()
    assert kernel.take(tmp_path, 120) is None
    assert time.monotonic() - started < 10 and len(asked) >= 2
    assert kernel.km is None and not os.path.exists(folder)


def test_a_kernel_that_cannot_start_leaves_no_socket_folder(monkeypatch):
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    async def no_process(self, cmd, **kw):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", no_process)
    ours = f"{tempfile.gettempdir()}/audit-kernel-{os.getpid()}-*"
    before = set(glob.glob(ours))
    kernel = WarmKernel()
    assert kernel.km is None and set(glob.glob(ours)) == before
    kernel.close()  # nothing to do, no error


def test_the_sweep_leaves_a_folder_whose_lock_is_held(tmp_path):
    """A live run in another PID namespace (a container sharing /tmp) has a pid that looks
    dead here: its held lock keeps its folder."""
    folder = tmp_path / "audit-kernel-999999999-other"
    folder.mkdir()
    lock = os.open(folder / "owner.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    old = time.time() - 3600
    os.utime(folder, (old, old))
    try:
        assert sweep_kernel_folders(str(tmp_path)) == [] and folder.is_dir()
    finally:
        os.close(lock)  # the run ends without cleaning up (killed)
    assert sweep_kernel_folders(str(tmp_path)) == [folder] and not folder.exists()


def test_a_preload_that_fails_leaves_rendering_to_say_why(hostile, tmp_path, monkeypatch):  # noqa: F811
    """The import-and-template thread swallows its error; rendering meets it and reports it."""
    import threading

    import audit.report.render as render_module

    def broken():
        raise RuntimeError("template broken")

    monkeypatch.setattr(render_module, "_exporter", broken)
    seen: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args))
    logs, secrets = hostile
    result = run_report(
        [logs], secrets_path=secrets, period=parse_period("2026-10"), out_dir=tmp_path / "r"
    )
    assert seen == []  # no error escaped the thread
    assert result.rendering_failed and result.exit_code in (1, 2)
    assert result.message.startswith("rendering failed: HTML conversion failed: RuntimeError")
    assert (result.run_dir / "findings.json").is_file()


def test_the_preload_imports_requests_in_the_calling_thread():
    """Found in a clean clone (the demo's stderr test failed one run in two): requests adds its
    filter for urllib3's SOCKS notice while it is imported; imported in the preload thread, the
    main thread's `catch_warnings` blocks could undo it and the notice reached stderr."""
    code = (
        "import sys, threading\n"
        "from audit.report.render import preload\n"
        "assert 'requests' not in sys.modules\n"
        "threading.Thread.start = lambda self: None  # the thread itself never runs\n"
        "preload()\n"
        "print('requests' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_after_a_rendering_the_kernel_is_shut_down_at_once(tmp_path):
    """Papermill has every output by then: no shutdown request for the kernel to free its
    memory object by object first (0.5 s at 1M deliveries)."""
    kernel = WarmKernel()
    km, pid = kernel.km, kernel.km.provisioner.pid
    calls = []
    real = km.shutdown_kernel

    async def shutdown_kernel(now=False, restart=False):
        calls.append(now)
        return await real(now=now, restart=restart)

    km.shutdown_kernel = shutdown_kernel
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    html = render(_notebook(tmp_path / "probe.ipynb"), run_dir, title="t", timeout_s=60,
                  kernel=kernel)  # fmt: skip
    assert "imports warm" in html.read_text()
    assert calls == [True] and not _alive(pid)


@pytest.mark.slow
def test_a_client_ready_without_emptying_iopub_misses_no_output_of_its_first_cell():
    """The report's clients are ready once the kernel answered and IOPub got a message (no
    0.2 s wait for IOPub to go quiet): each new client still gets all of its first cell's
    output, and only that cell's (the messages left over belong to other requests)."""
    from jupyter_core.utils import run_sync

    km = kernel_manager_class()(kernel_name="python3")
    run_sync(km.start_kernel)()
    try:
        for k in range(3):
            kc = km.client()
            assert type(kc).__name__ == "ReadyClient"
            kc.start_channels()
            run_sync(kc.wait_for_ready)(timeout=60)
            msg_id = kc.execute(f"print('first output {k}')")
            got = []
            while True:
                msg = run_sync(kc.get_iopub_msg)(timeout=30)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    got.append(msg["content"]["text"])
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            assert got == [f"first output {k}\n"]
            kc.stop_channels()
    finally:
        run_sync(km.shutdown_kernel)(now=True)
