"""Human words for the codes of the service and of the toolkit, for pages and figures.

Signature verdicts (``missing_signature``), event outcomes (``exhausted``), incident statuses
(``approval_required``) and sources (``CLIENT_REPORTED``) are codes: the CSV, JSON and Parquet
files keep them as they are, for machines; a report, a figure or an evidence table shows them
as words (``missing signature``, ``client reported``). Only known codes change: an id that
looks like one (``wh_main``) is never rewritten.
"""

from __future__ import annotations

from functools import cache

from audit.ingest.verdict_rules import VERDICTS
from audit.spec import INCIDENT_CLASSES, SOURCES, STATUSES

__all__ = ["codes", "words"]

#: Outcomes of an event (``audit.analysis.deliveries.OUTCOMES``, repeated to stay import-light).
_OUTCOMES = ("delivered", "exhausted", "pending", "lost", "unknown")


@cache
def codes() -> frozenset[str]:
    """Every code :func:`words` rewrites: verdicts, outcomes, statuses, sources, classes."""
    return frozenset((*VERDICTS, *_OUTCOMES, *STATUSES, *SOURCES, *INCIDENT_CLASSES))


def words(value: object) -> str:
    """A known code as words (``_`` as a space, lower case); any other value as its text.

    >>> [words(v) for v in ("missing_signature", "CLIENT_REPORTED", "wh_main", "valid")]
    ['missing signature', 'client reported', 'wh_main', 'valid']
    """
    text = str(value)
    if text in codes():
        return text.replace("_", " ").lower()
    return text
