"""``python -m audit.service.fake``: serve a fake on 127.0.0.1 until interrupted."""

import sys

from audit.service.fake.cli import main

sys.exit(main())
