"""The public API is curated, sorted and importable; every CLI command has help."""

from __future__ import annotations

import sys
import types

import click
import pytest

import audit
from audit import findings
from audit.cli import cli, main


def test_all_is_sorted_and_complete():
    assert audit.__all__ == sorted(audit.__all__, key=lambda s: (not s.isupper(), s))
    for name in audit.__all__:
        assert hasattr(audit, name), name


def test_all_lists_every_public_name():
    """httpx's rule: every public, non-module name of the package is in __all__, and no more
    (``dir``: the names are imported on first use)."""
    public = {
        name
        for name in dir(audit)
        if not name.startswith("_") and not isinstance(getattr(audit, name), types.ModuleType)
    }
    assert public - {"annotations"} == set(audit.__all__)


@pytest.mark.parametrize("package", [audit, findings])
def test_lazy_names_are_the_public_names(package):
    assert set(package._WHERE) == set(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is getattr(sys.modules[package._WHERE[name]], name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        package.nope  # noqa: B018


@pytest.mark.parametrize("command", cli.list_commands(click.Context(cli)))
def test_every_command_has_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage:" in out and len(out.splitlines()) > 3
