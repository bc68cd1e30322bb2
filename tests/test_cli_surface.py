"""The CLI's commands and options: a restructuring of the CLI must not silently drop one.

``CLI_SURFACE`` was generated once from the CLI as it stood (issue 12) by walking the click
group; arguments are upper case, an option is its flags joined by ``/``. New commands and
options may be added freely (the check is "at least these"); removing or renaming one is a
breaking change and must be made here on purpose.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from audit.cli import cli
from audit.cli.main import COMMANDS

_API = ["--base-url", "--api-key-env", "--timeout", "--max-attempts"]

# fmt: off
CLI_SURFACE: dict[str, list[str]] = {
    "audit": ["--version"],
    "audit analyze": ["LOGS", "--secrets", "--subscriptions", "--as-of", "--clock-start",
                      "--header-prefix", "--out"],
    "audit demo": ["--out", "--seed"],
    "audit probe": ["URL", "--secrets", "--subscription", "--out", "--only", "--dry-run",
                    "--header-prefix"],
    "audit receive": ["--port", "--host", "--secrets", "--subscription", "--out",
                      "--header-prefix"],
    "audit report": ["LOGS", "--secrets", "--subscriptions", "--period", "--params", "--mutes",
                     "--out", "--fail-on", "--skip-if-exists", "--timeout"],
    "audit simulate": ["--out", "--seed", "--start", "--days", "--incidents"],
    "audit snapshot": [*_API, "--out"],
    "audit verify": ["LOGS", "--secrets", "--out", "--header-prefix"],
    "audit webhooks": [],
    "audit webhooks create": [*_API, "--url", "--event", "--description", "--secrets"],
    "audit webhooks delete": [*_API, "SUBSCRIPTION_ID", "--yes"],
    "audit webhooks list": [*_API, "--json"],
    "audit webhooks rotate-secret": [*_API, "SUBSCRIPTION_ID", "--secrets"],
    "audit webhooks test": [*_API, "SUBSCRIPTION_ID"],
    "audit webhooks update": [*_API, "SUBSCRIPTION_ID", "--url", "--event", "--active/--inactive",
                              "--description"],
}
# fmt: on


def _param(p: click.Parameter) -> str:
    if isinstance(p, click.Option):
        return "/".join(sorted(p.opts + p.secondary_opts))
    return str(p.name).upper()


def surface(cmd: click.Command = cli, path: tuple[str, ...] = ("audit",)) -> dict[str, list[str]]:
    """Every command path of the CLI and its parameters, as in :data:`CLI_SURFACE`."""
    out = {" ".join(path): [_param(p) for p in cmd.params]}
    if isinstance(cmd, click.Group):  # the audit group loads its commands on first use
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            out |= surface(sub, (*path, name))
    return out


def test_every_command_and_option_is_still_there():
    now = surface()
    missing_commands = sorted(set(CLI_SURFACE) - set(now))
    assert missing_commands == [], "commands dropped from the CLI"
    for command, params in CLI_SURFACE.items():
        dropped = [p for p in params if p not in now[command]]
        assert dropped == [], f"{command}: parameters dropped or renamed"


def test_the_walk_sees_a_dropped_option():
    # the check above can fail: a command without one of its options is reported
    @click.command()
    @click.option("--out")
    def cmd(out: str) -> None: ...

    assert surface(cmd, ("x",)) == {"x": ["--out"]}
    cmd.params.clear()
    assert "--out" not in surface(cmd, ("x",))["x"]


@pytest.mark.parametrize("command", sorted(CLI_SURFACE))
def test_every_command_has_help(command: str):
    args = [*command.split()[1:], "--help"]
    result = CliRunner().invoke(cli, args, prog_name="audit")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: {command}")
    for param in CLI_SURFACE[command]:
        if param.startswith("--") and param != "--version":
            assert param.split("/")[0] in result.output, (command, param)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_summary_is_the_first_sentence_of_the_commands_help(name: str):
    # ``audit --help`` shows the summaries of COMMANDS without loading the commands' modules
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert COMMANDS[name].summary == command.get_short_help_str(limit=1_000)


def test_the_top_help_lists_every_command_without_loading_one():
    script = (
        "import sys\n"
        "from audit.cli.main import COMMANDS, main\n"
        "main(['--help'])\n"
        "print(sorted({c.module for c in COMMANDS.values()} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    *help_lines, loaded = done.stdout.splitlines()
    assert loaded == "[]"
    listed = [line.split()[0] for line in help_lines[help_lines.index("Commands:") + 1 :]]
    assert listed == sorted(COMMANDS)
