"""Settings every test shares."""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    """The tests of ^C (``tests/test_interrupts.py``, ``tests/test_side.py``,
    ``tests/test_console.py``) model a caller that handles it as Python does by default
    (``KeyboardInterrupt``). A test session started as a background job of a script (``make
    test &``, a CI runner's shell, ``nohup``) inherits ^C ignored, and so do the processes it
    starts: a ^C such a test sends was then ignored, as it should be, and the test failed
    (issue 42: "failed under load, each passing alone"). Python's default is restored here."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The rules' SQL kept between processes (audit.analysis.compiled): in a folder of this
    # session, never the user's own cache (its subprocesses inherit the variable).
    import os
    import tempfile

    if not os.environ.get("AUDIT_CACHE_DIR"):
        os.environ["AUDIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="audit-test-cache-")
