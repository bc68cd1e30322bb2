"""The kernel that runs a report notebook, and one started ahead of time.

The kernel is this interpreter's ipykernel (``sys.executable -m ipykernel_launcher``, whatever
kernelspecs the user has installed) and talks to us over IPC (Unix sockets in a private
folder) rather than TCP on localhost: nothing listens on a port, and ipykernel has no reason
to print its "running over TCP without encryption" warning.

:class:`WarmKernel` starts that kernel, with the report's imports, when a run begins: its
start-up (about 2 s, on the core the analyses leave idle) then overlaps the analyses instead of
following them. At rendering it moves into the run folder and papermill runs the notebook on
it; a warm kernel that died or does not answer is dropped and papermill starts a fresh one, as
it would have without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

from audit.atomic import abandoned

__all__ = ["WARM_IMPORTS", "WarmKernel", "kernel_manager_class", "sweep_kernel_folders"]

#: Executed at kernel start-up (``IPKernelApp.exec_lines``): what the packaged notebook's
#: first cells import. Importing a module twice is free, so a custom notebook loses nothing.
WARM_IMPORTS = (
    "from IPython.display import display",
    "import audit.report.figures, audit.report.views",
)

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


class WarmKernel:
    """A report kernel started now, for a notebook rendered later.

    Use as a context manager (the kernel is shut down on leaving, however the run ends), or
    call :meth:`close`. A kernel that cannot start does not fail the run: ``km`` stays None and
    rendering starts its own (only an interrupt, such as Ctrl-C, goes on up, after cleaning up).
    """

    def __init__(self) -> None:
        from jupyter_core.utils import run_sync  # start-up: as jupyter_client (kernel only)

        self._run_sync: Callable[..., Any] = run_sync
        #: The kernel manager (``kernel_manager_class()``), None when none is running.
        self.km: Any = None
        km = None
        try:
            km = kernel_manager_class()(kernel_name="python3")
            run_sync(km.start_kernel)(
                env={**os.environ, **QUIET_ENV},
                extra_arguments=[f"--IPKernelApp.exec_lines={line}" for line in WARM_IMPORTS],
            )
            self.km = km
        except BaseException as e:  # a fresh kernel at rendering reports its own error
            if km is not None:
                self._shutdown(km, now=True)
            if not isinstance(e, Exception):
                raise

    def __enter__(self) -> WarmKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take(self, cwd: Path, timeout_s: float) -> Any:
        """The kernel manager, ready and working in ``cwd``, for papermill's ``km``; None
        (and the kernel shut down) when it died or does not answer within ``timeout_s``."""
        km = self.km
        if km is None:
            return None
        kc = None
        try:
            if not self._run_sync(km.is_alive)():
                raise RuntimeError("the warm kernel died")
            kc = km.client()
            # Only the shell channel: its request waits in the socket until the kernel serves
            # it, so the reply itself says the kernel is ready (papermill's own client then
            # waits for it to answer on both channels: ``ReadyClient``).
            kc.start_channels(iopub=False, stdin=False, hb=False, control=False)
            code = f"import os as _os; _os.chdir({str(cwd)!r}); del _os"
            msg_id = kc.execute(code, silent=True, store_history=False)
            deadline = time.monotonic() + timeout_s
            while True:  # a ready kernel answers a chdir at once
                try:
                    reply = self._run_sync(kc.get_shell_msg)(timeout=1)
                except Empty:  # still starting (its imports), or dead: asked each second
                    if time.monotonic() > deadline or not self._run_sync(km.is_alive)():
                        raise RuntimeError("the warm kernel does not answer") from None
                    continue
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
            if reply["content"]["status"] != "ok":
                raise RuntimeError("the warm kernel could not enter the run folder")
        except BaseException as e:  # Ctrl-C included: never leave the kernel behind
            self.km = None
            self._shutdown(km, now=True)
            if not isinstance(e, Exception):
                raise
            return None
        finally:
            if kc is not None:
                kc.stop_channels()
        return km

    def close(self) -> None:
        """Shut the kernel down at once and remove its socket folder.

        At once (nbclient's ``shutdown_kernel="immediate"``), also after a rendering: papermill
        has every output by then, and the kernel has nothing to save. A shutdown request made
        the kernel free its objects one by one before it exited: 0.5 s at 1M deliveries,
        against 0.1 s.
        """
        km, self.km = self.km, None
        if km is not None:
            self._shutdown(km, now=True)

    def _shutdown(self, km: Any, *, now: bool) -> None:
        try:
            if km.has_kernel:
                self._run_sync(km.shutdown_kernel)(now=now)
        except Exception:  # a kernel already gone, or one that never started
            pass
        finally:
            km.audit_discard()  # the socket folder and its lock, whatever happened above
