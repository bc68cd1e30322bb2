"""The report's kernel: this interpreter's ipykernel over Unix sockets, started by papermill in
the run folder (``run_dir="."``), shut down at once after the rendering; socket folders of
killed runs swept."""

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

import audit.report.render as render_module
from audit.errors import ReportError
from audit.report import parse_period, run_report
from audit.report.kernel import kernel_manager_class, sweep_kernel_folders
from audit.report.render import render
from tests.test_reports import hostile  # noqa: F401  (fixture)

#: Prints the notebook's run_dir parameter and the kernel's working folder.
PROBE = "import os\nprint('run_dir', run_dir, 'cwd', os.getcwd())"


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
def managers(monkeypatch) -> list:
    """Every kernel manager rendering starts, and each ``now`` its shutdowns were asked with."""
    got: list = []
    real = kernel_manager_class()

    class Recorded(real):  # type: ignore[misc, valid-type]  # a class made at run time
        def __init__(self, **kw):
            super().__init__(**kw)
            self.nows: list[bool] = []
            got.append(self)

        async def shutdown_kernel(self, now=False, restart=False):
            self.nows.append(now)
            self.pid_seen = self.provisioner.pid if self.provisioner else None
            return await super().shutdown_kernel(now=now, restart=restart)

    monkeypatch.setattr(render_module, "kernel_manager_class", lambda: Recorded)
    return got


def test_the_notebook_runs_in_the_run_folder_and_names_no_path(tmp_path, managers):
    """``run_dir="."`` and the kernel working in the run folder: the notebook left there names
    no path, and after the rendering the kernel is shut down at once (papermill has every
    output; a shutdown request made it free its objects one by one: 0.5 s at 1M) and its
    socket folder removed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    html = render(_notebook(tmp_path / "probe.ipynb"), run_dir, title="t", timeout_s=60)
    assert f"run_dir . cwd {run_dir}" in html.read_text()
    assert str(tmp_path) not in "".join(
        c.source for c in nbformat.read(run_dir / "report.ipynb", as_version=4).cells
    )
    [km] = managers
    assert km.nows and all(km.nows)
    assert not _alive(km.pid_seen) and not os.path.exists(km._audit_folder)


def test_a_kernel_that_cannot_start_fails_the_rendering_in_one_line_and_leaves_no_socket_folder(
    tmp_path, monkeypatch
):
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    async def no_process(self, cmd, **kw):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", no_process)
    ours = f"{tempfile.gettempdir()}/audit-kernel-{os.getpid()}-*"
    before = set(glob.glob(ours))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(ReportError, match="Too many open files") as got:
        render(_notebook(tmp_path / "probe.ipynb"), run_dir, title="t", timeout_s=60)
    assert "\n" not in str(got.value)
    assert set(glob.glob(ours)) == before


def test_a_broken_html_conversion_leaves_the_findings_and_says_why(hostile, tmp_path, monkeypatch):  # noqa: F811
    def broken():
        raise RuntimeError("template broken")

    monkeypatch.setattr(render_module, "_exporter", broken)
    logs, secrets = hostile
    result = run_report(
        [logs], secrets_path=secrets, period=parse_period("2026-10"), out_dir=tmp_path / "r"
    )
    assert result.rendering_failed and result.exit_code in (1, 2)
    assert result.message.startswith("rendering failed: HTML conversion failed: RuntimeError")
    assert (result.run_dir / "findings.json").is_file()
    assert result.manifest["failure"]["stage"] == "rendering"


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
