"""CLI commands that talk to the service's API (``audit webhooks ...``, ``audit snapshot``)."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
