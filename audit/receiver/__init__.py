"""The receiver side: capture that writes the logs ``audit`` reads, and a conformance probe.

- :class:`CaptureMiddleware` (ASGI: Starlette, FastAPI) and :class:`WSGICaptureMiddleware`
  (Flask, Django) append each webhook request to ``<folder>/<UTC day>.jsonl`` in the capture
  format, with the answer's status and duration, durably before the answer leaves.
- :func:`receiver_app` is the reference receiver (verify, answer 401 or 204, capture);
  ``audit receive`` serves it with uvicorn (the ``audit[receiver]`` extra).
- :func:`run_probe` sends one signed (or deliberately broken) ``webhook.test`` request per check
  and judges the answers; ``audit probe`` writes ``probe.json``, findings, JUnit XML and HTML.

See ``docs/receiver.md``.
"""

from __future__ import annotations

from audit.receiver.asgi import RECEIVED_AT_KEY, CaptureMiddleware
from audit.receiver.capture_log import CaptureRecord, CaptureWriter, capture_line
from audit.receiver.probe import USER_AGENT, CheckResult, ProbeResult, check_target, run_probe
from audit.receiver.probe_plan import CHECKS, Check
from audit.receiver.reference import receiver_app
from audit.receiver.wsgi import WSGICaptureMiddleware

__all__ = [
    "CHECKS",
    "RECEIVED_AT_KEY",
    "USER_AGENT",
    "CaptureMiddleware",
    "CaptureRecord",
    "CaptureWriter",
    "Check",
    "CheckResult",
    "ProbeResult",
    "WSGICaptureMiddleware",
    "capture_line",
    "check_target",
    "receiver_app",
    "run_probe",
]
