"""The ``audit`` script's quick end (``audit.console.script``): the command's output, exit code
and exit handlers are all there; the interpreter's teardown is not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Runs ``script()`` as the installed ``audit`` script does, with a hook: ``sys.argv[1]`` is
#: code run inside the command (as a command's module would), then the command line proper.
RUN = (
    "import sys, atexit, os, signal\n"
    "import audit.cli.main\n"
    "cli = sys.modules['audit.cli.main']\n"
    "run, hook = cli.main, sys.argv.pop(1)\n"
    "def main(argv=None):\n"
    "    exec(hook)\n"
    "    return run(argv)\n"
    "cli.main = main\n"
    "from audit.console import script\n"
    "sys.exit(script())\n"
)


def _script(hook: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUN, hook, *args], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_the_output_and_the_exit_code_are_whole():
    # stdout is a pipe (block-buffered): 200 KB still unflushed when the command returns
    got = _script("print('x' * 200_000)", "--version")
    assert got.returncode == 0
    assert got.stdout.startswith("x" * 200_000 + "\n") and "audit, version" in got.stdout
    bad = _script("pass", "verify", "/nonexistent/log.jsonl")  # no --secrets: a usage error
    assert bad.returncode == 3 and "Missing option '--secrets'" in bad.stderr


def test_exit_handlers_registered_by_the_command_still_run():
    got = _script("atexit.register(lambda: print('handler ran', flush=True))", "--version")
    assert got.returncode == 0 and got.stdout.rstrip().endswith("handler ran")


def test_the_interpreter_is_not_torn_down_after_the_command():
    # An object freed only by the teardown says so on stderr (as freeing every module of a
    # report did, for 0.13-0.18 s).
    hook = (
        "class Late:\n"
        "    def __del__(self):\n"
        "        sys.stderr.write('torn down\\n')\n"
        "sys.modules['late_object'] = Late()\n"
    )
    got = _script(hook, "--version")
    assert got.returncode == 0 and "torn down" not in got.stderr


def test_a_command_that_raises_ends_as_python_ends():
    got = _script("raise RuntimeError('boom')", "--version")
    assert got.returncode == 1 and "RuntimeError: boom" in got.stderr


# ^C at any moment of a short command (issue 44): before, a ^C in its first half second printed
# Python's traceback of whichever import it landed in (and once ended with exit 0).

#: The ``audit`` script as pip writes it (``[project.scripts]``).
SCRIPT = "import sys\nfrom audit.console import script\nsys.exit(script())\n"

#: Runs the script (``sys.argv[0]`` named ``audit``, as the installed script is) with a ^C sent
#: to itself when the module ``sys.argv[1]`` is first imported: a landing point, not a time.
AT_IMPORT = (
    "import os, signal, sys\n"
    "target = sys.argv.pop(1)\n"
    "class KillAt:\n"
    "    @staticmethod\n"
    "    def find_spec(name, path=None, target_=None):\n"
    "        if name == target:\n"
    "            os.kill(os.getpid(), signal.SIGINT)\n"
    "sys.meta_path.insert(0, KillAt)\n"
    "sys.argv[0] = os.path.join(os.getcwd(), 'audit')\n"
    "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'))\n"
)


def _audit_script(tmp_path: Path) -> Path:
    path = tmp_path / "audit"
    path.write_text(SCRIPT)
    return path


def _no_traceback_of_audit(err: str) -> None:
    assert "Traceback" not in err or str(ROOT / "audit") not in err, err
    assert "Exception ignored" not in err, err


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("audit.lazy", ["--help"]),  # the package's top
        ("click", ["--help"]),  # the command line's library
        ("audit.cli.main", ["--help"]),  # the group
        ("audit.ingest.secrets", ["--help"]),  # what the group loads
        ("audit.cli.data", ["verify", "--help"]),  # the command's module
    ],
)
def test_a_ctrl_c_while_the_script_loads_is_aborted_exit_3(tmp_path, module, args):
    _audit_script(tmp_path)
    got = subprocess.run(
        [sys.executable, "-c", AT_IMPORT, module, *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert (got.returncode, got.stderr, got.stdout) == (3, "audit: aborted\n", "")


def test_a_ctrl_c_once_the_command_returned_is_ignored_not_a_traceback():
    # The command is done (its output whole): a ^C as the script ends changes nothing.
    got = _script("atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))", "--version")
    assert got.returncode == 0 and got.stdout.startswith("audit, version ")
    _no_traceback_of_audit(got.stderr)
    assert got.stderr == ""


def test_a_ctrl_c_at_any_moment_of_a_short_command_is_one_line(tmp_path):
    """``audit --help`` interrupted after 0, 0.05, ... 0.5 s: never a traceback of audit's code,
    never exit 0 unless the command had finished (its whole output). The interpreter's own
    start, before the script's first line runs, is Python's (it dies of the signal)."""
    script = _audit_script(tmp_path)
    whole = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    ).stdout  # fmt: skip
    assert "webhooks" in whole
    seen = set()
    for step in range(11):
        proc = subprocess.Popen(
            [sys.executable, str(script), "--help"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(step * 0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        _no_traceback_of_audit(err)
        if proc.returncode == 3:  # (click writes an empty line first when it was parsing)
            assert err.strip() == "audit: aborted", err
        elif proc.returncode == 0:
            assert (err, out) == ("", whole)  # the command had finished
        else:  # Python's own start: killed by the signal, or its site module stopped
            assert proc.returncode in (-signal.SIGINT, 1), (proc.returncode, err)
            assert str(ROOT / "audit") not in err
        seen.add(proc.returncode)
    assert seen  # (which outcomes occur depends on the machine's speed)
