"""audit: prove, with evidence, how the incident service's signed webhook deliveries behave."""

from __future__ import annotations

__version__ = "0.1.0"
