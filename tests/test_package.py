"""The public API is curated, sorted and importable; every CLI command has help."""

from __future__ import annotations

import pytest

import audit
from audit.cli import cli, main


def test_all_is_sorted_and_complete():
    assert audit.__all__ == sorted(audit.__all__, key=lambda s: (not s.isupper(), s))
    for name in audit.__all__:
        assert hasattr(audit, name), name


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_has_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage:" in out and len(out.splitlines()) > 3
