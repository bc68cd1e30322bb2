"""The ``audit`` command line: thin click commands, each calling one library function.

- ``main``: the group, the exit codes and :func:`main`, the ``audit`` script's entry point.
- ``data``: verify, simulate, demo, report; ``analysis``: analyze and its summary; ``store``:
  ingest, tables from the store.
- ``client``: the service's API (webhooks, snapshot); ``receiver``: the reference receiver, probe.
"""

from audit.cli.main import cli, main

__all__ = ["cli", "main"]
