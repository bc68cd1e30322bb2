"""The public API is curated, sorted and importable; every CLI command has help."""

from __future__ import annotations

import types

import pytest

import audit
from audit.cli import cli, main


def test_all_is_sorted_and_complete():
    assert audit.__all__ == sorted(audit.__all__, key=lambda s: (not s.isupper(), s))
    for name in audit.__all__:
        assert hasattr(audit, name), name


def test_all_lists_every_public_name():
    """httpx's rule: every public, non-module name of the package is in __all__, and no more."""
    public = {
        name
        for name, value in vars(audit).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(audit.__all__)


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_has_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage:" in out and len(out.splitlines()) > 3
