"""The ``audit`` script's quick end (``audit.console.script``): the command's output, exit code
and exit handlers are all there; the interpreter's teardown is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Runs ``script()`` as the installed ``audit`` script does, with a hook: ``sys.argv[1]`` is
#: code run inside the command (as a command's module would), then the command line proper.
RUN = (
    "import sys, atexit\n"
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
