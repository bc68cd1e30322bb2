"""The kernel that runs a report notebook.

The kernel is this interpreter's ipykernel (``sys.executable -m ipykernel_launcher``, whatever
kernelspecs the user has installed) and talks to papermill over IPC (Unix sockets in a private
folder) rather than TCP on localhost: nothing listens on a port, and ipykernel has no reason
to print its "running over TCP without encryption" warning. Papermill starts it when the
notebook is rendered (:func:`audit.report.render.render`) and shuts it down after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

from audit.atomic import abandoned

__all__ = ["QUIET_ENV", "kernel_manager_class", "sweep_kernel_folders"]

#: debugpy (loaded by ipykernel) warns about frozen modules on Python 3.11+: noise for a
#: batch kernel that never debugs.
QUIET_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def kernel_manager_class() -> type[Any]:
    """A jupyter_client ``AsyncKernelManager`` whose ``python3`` is this interpreter's
    ipykernel, over Unix sockets in a private (0700) folder."""
    from ipykernel.kernelspec import (  # start-up: ipykernel only where a kernel starts
        RESOURCES,
        get_kernel_dict,
    )
    from jupyter_client import (  # start-up: jupyter_client (zmq) only where a kernel starts
        AsyncKernelClient,
        AsyncKernelManager,
    )
    from jupyter_client.kernelspec import (  # start-up: as jupyter_client
        KernelSpec,
        KernelSpecManager,
    )

    class ReadyClient(AsyncKernelClient):
        """jupyter_client's client, ready once the kernel has answered ``kernel_info`` and a
        message reached IOPub (so it is subscribed: a cell's output cannot be missed).

        jupyter_client then also empties IOPub until it stays silent for 0.2 s, a wait every
        rendering paid; the messages left there belong to that request, and nbclient reads
        only the messages of the cell it runs.
        """

        async def wait_for_ready(self, timeout: float | None = None) -> None:
            deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
            while True:
                self.kernel_info()
                try:
                    reply = await self.shell_channel.get_msg(timeout=1)
                except Empty:
                    reply = None
                if reply is not None and reply["msg_type"] == "kernel_info_reply":
                    try:
                        await self.iopub_channel.get_msg(timeout=0.2)
                    except Empty:  # not subscribed yet: asked again
                        pass
                    else:
                        self._handle_kernel_info_reply(reply)
                        return
                if not await self._async_is_alive():
                    raise RuntimeError("Kernel died before replying to kernel_info")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")

    class OwnPythonSpecs(KernelSpecManager):
        """``python3`` is always this interpreter's ipykernel."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            if kernel_name == "python3":
                return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    class IPCKernelManager(AsyncKernelManager):
        """A kernel over Unix sockets in a private (0700) folder."""

        def __init__(self, **kwargs):
            sweep_kernel_folders()
            folder = tempfile.mkdtemp(prefix=f"{_FOLDER}{os.getpid()}-")
            name = f"kernel-{uuid.uuid4().hex[:12]}"
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("connection_file", os.path.join(folder, f"{name}.json"))
            kwargs.setdefault("ip", os.path.join(folder, name))
            kwargs.setdefault("kernel_spec_manager", OwnPythonSpecs())
            kwargs.setdefault("client_factory", ReadyClient)
            # Held while this manager lives: the sweep leaves a folder whose lock is held,
            # whatever its pid says (another PID namespace sharing the temporary directory).
            self._audit_lock: int | None = None
            try:
                self._audit_lock = _hold(folder)
                super().__init__(**kwargs)
            except BaseException:  # nothing of ours may stay behind
                shutil.rmtree(folder, ignore_errors=True)
                if self._audit_lock is not None:
                    os.close(self._audit_lock)
                raise
            self._audit_folder = folder
            self._audit_clients: list = []

        def audit_discard(self) -> None:
            """Close the clients' sockets, remove the socket folder, release its lock
            (idempotent; after a shutdown, or when the kernel never started)."""
            for kc in self._audit_clients:
                kc.stop_channels()
            self._audit_clients.clear()
            shutil.rmtree(self._audit_folder, ignore_errors=True)
            if self._audit_lock is not None:
                os.close(self._audit_lock)
                self._audit_lock = None

        # jupyter_client types start_kernel as its synchronous base class's; here, as in its
        # AsyncKernelManager, it is a coroutine
        async def start_kernel(self, **kwargs):  # type: ignore[override]  # see above
            """Start the kernel; when it cannot start, nothing of ours stays behind (the
            socket folder and its lock)."""
            try:
                return await super().start_kernel(**kwargs)
            except BaseException:
                self.audit_discard()
                raise

        def client(self, **kwargs):
            """A client, remembered so that shutting the kernel down closes its sockets
            (nbclient leaves them open on a kernel it did not start)."""
            kc = super().client(**kwargs)
            self._audit_clients.append(kc)
            return kc

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client sends SIGINT before every shutdown request; when it lands while
            # the idle kernel handles a message, ipykernel logs "KeyboardInterrupt caught in
            # kernel" on stderr (seen about once in ten runs). Once every cell has run there
            # is nothing to interrupt: skip it and let the shutdown request (then a kill
            # after the grace period) end the kernel. Interrupts on a timeout still happen.
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            if not restart:
                self.audit_discard()

    return IPCKernelManager


_FOLDER = "audit-kernel-"
_LOCK = "owner.lock"


def _hold(folder: str) -> int | None:
    """An exclusive ``flock`` on ``folder/owner.lock``, held by the returned descriptor."""
    try:
        import fcntl  # platform: POSIX only
    except ImportError:  # pragma: no cover - not POSIX: the pid and age rules alone
        return None
    fd = os.open(os.path.join(folder, _LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _held(folder: Path) -> bool:
    """Whether a live manager holds ``folder``'s lock (another process, any PID namespace)."""
    import fcntl  # platform: POSIX only (called where os.name is "posix")

    try:
        fd = os.open(folder / _LOCK, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False  # none (a folder of an older version): the pid and age rules decide
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the lock we may have taken
    return False


def sweep_kernel_folders(root: str | None = None) -> list[Path]:
    """Remove the socket folders (``audit-kernel-<pid>-*`` in the temporary directory) left by
    runs killed before they could (``kill -9``): ours (same user), whose process is gone, whose
    lock no live manager holds, over a minute old. Returns what was removed; never raises."""
    gone: list[Path] = []
    if os.name != "posix":
        return gone
    base = Path(root or tempfile.gettempdir())
    try:
        left = [p for p in base.iterdir() if p.name.startswith(_FOLDER)]
    except OSError:
        return gone
    now = time.time()
    for p in left:
        pid = p.name[len(_FOLDER) :].partition("-")[0]
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            info = p.lstat()
            if (
                stat.S_ISDIR(info.st_mode)
                and info.st_uid == os.getuid()
                and abandoned(int(pid), info, now)
                and not _held(p)
            ):
                shutil.rmtree(p)
                gone.append(p)
    return gone
