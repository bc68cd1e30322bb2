"""The ``audit`` script's entry point (``[project.scripts]``).

The command line loads click, the commands and their modules first (0.2-0.3 s); a ^C meanwhile
was Python's traceback of whichever import it landed in. It ends here in one line and exit 3,
as a ^C in a command does (:func:`audit.cli.main.main`). Nothing heavy is imported before the
``try``: ``audit/__init__`` loads its names on use.
"""

from __future__ import annotations

import sys

#: The exit code of a ^C, as :data:`audit.cli.main.EXIT_BAD_INPUT`.
EXIT_ABORTED = 3


def main(argv: list[str] | None = None) -> int:
    """Load the command line and run it on ``argv`` (default: the process's arguments)."""
    try:
        from audit.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("audit: aborted\n")
        return EXIT_ABORTED
    return run(argv)
