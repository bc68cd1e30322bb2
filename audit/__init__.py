"""audit: prove, with evidence, how the incident service's signed webhook deliveries behave.

The public API, by stage (files -> frames -> verdicts -> analyses)::

    load_captures, read_secrets          read capture logs and the secrets file
    sign, verify                         one request (pure; reference time is an argument)
    verify_frame, audit_signatures       every stored request, as of its receipt time
    kaplan_meier, km_quantile            time to takedown with censoring
"""

from __future__ import annotations

from audit.errors import AuditError
from audit.load import Captures, load_captures
from audit.secrets import SecretStore, read_secrets
from audit.signatures import VERDICTS, sign, verify
from audit.takedown import kaplan_meier, km_quantile, takedown_durations
from audit.verification import audit_signatures, verdict_counts, verify_frame

__version__ = "0.1.0"

__all__ = [
    "VERDICTS",
    "AuditError",
    "Captures",
    "SecretStore",
    "audit_signatures",
    "kaplan_meier",
    "km_quantile",
    "load_captures",
    "read_secrets",
    "sign",
    "takedown_durations",
    "verdict_counts",
    "verify",
    "verify_frame",
]
