"""Findings: the catalogue of controls, the controls by family, mutes and the runner."""

from audit.findings.runner import *  # noqa: F403
from audit.findings.runner import __all__ as __all__
