"""CLI commands over stored data: verify, simulate, analyze, report, demo."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
