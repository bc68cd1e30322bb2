"""``python -m audit.cli``: the same as the ``audit`` script."""

import sys

from audit.cli.main import main

sys.exit(main())
