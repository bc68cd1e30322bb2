"""The report's load step, in one function: files -> verified deliveries, listings, file list.

:func:`load_inputs` is the only place the report reads capture logs, the secrets file (once),
snapshots and mutes. With an evidence store (``--store DIR``) the logs, if any, are ingested
into it first (verified once; files already there are skipped), the stored records whose
secrets changed are verified again (an ingest with no files, as ``audit analyze --store`` does)
and the deliveries of the period, with the lookback the analyses need, are read back from the
store without bodies.
Everything after it works on the :class:`Inputs` frames either way.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from audit.analysis.analyze import Takedown, read_store
from audit.analysis.subscriptions import load_snapshots, snapshot_files
from audit.errors import InputError, ParameterError
from audit.findings import read_mutes
from audit.ingest.query import (
    ANALYSIS_COLUMNS,
    ATTEMPT_LOOKBACK,
    not_valid_evidence,
)
from audit.ingest.receipts import FirstReceipts
from audit.ingest.secrets import read_secrets
from audit.ingest.side import Pending, cancelled_on_error
from audit.ingest.store import WRITTEN, IngestResult, ingest, reverify
from audit.ingest.verdicts import read_logs
from audit.paths import source_name

__all__ = ["Inputs", "load_inputs"]


@dataclass
class Inputs:
    """What the analyses need, loaded once.

    Attributes
    ----------
    deliveries
        One row per capture record, verified as of its receipt (``docs/tables.md``); None once
        :meth:`hand_over_deliveries` gave them away.
    subscriptions
        Listing snapshot rows (empty frame when none was given).
    files
        Every file read: ``source, size, sha256, records, unreadable, kind``. The secrets file
        has its size only (a hash would let weak secrets be guessed).
    secrets_age
        Each subscription's newest secret's ``valid_from`` (ns) or None; never a value.
    mutes
        The mutes frame, or None.
    evidence
        ``source, line, signature, timestamp_header, event_header, body`` of the records that
        are not valid (the deliveries frame has no body), or None.
    first_receipts
        The incident fold's input from a store when no ``clock_start`` was given (the
        deliveries then lack the incident fields), taken over by
        :func:`audit.analysis.analyze.run_analyses`; None from raw captures.
    takedown
        From a store, given ``clock_start``: the takedown analysis as of ``as_of`` (default
        ``end``), computed in a forked process while the deliveries were read
        (:func:`audit.analysis.analyze.read_store`); None otherwise.
    notes
        What loading did to the store that the user is told (always, not as progress): files
        ingested, records verified again because the secrets changed.
    secrets_file
        The secrets file's path as the caller gave it (never its contents), for the report's
        words on verification coverage; None when no secrets file was read.
    """

    deliveries: pd.DataFrame | None
    subscriptions: pd.DataFrame
    files: pd.DataFrame
    secrets_age: Mapping[str, int | None]
    mutes: pd.DataFrame | None = None
    evidence: pd.DataFrame | None = None
    first_receipts: FirstReceipts | None = None
    takedown: Pending[Takedown] | None = None
    notes: tuple[str, ...] = ()
    secrets_file: str | None = None

    def hand_over_deliveries(self) -> pd.DataFrame:
        """The deliveries, which this object then no longer holds (``deliveries`` is None).

        :func:`audit.report.pipeline.compute` takes them so that, once the analyses are done,
        the loaded frame is freed: the analyses keep the columns they need, not the body fields
        extracted at ingest (about 0.4 GB at 1M deliveries).
        """
        deliveries = self.deliveries
        if deliveries is None:
            raise InputError("these inputs were already computed once: load them again")
        self.deliveries = None
        return deliveries


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def load_inputs(
    logs: Sequence[str | os.PathLike[str]],
    *,
    secrets_path: str | os.PathLike[str],
    snapshots: Sequence[str | os.PathLike[str]] = (),
    mutes_path: str | os.PathLike[str] | None = None,
    header_prefix: str,
    client_id: str | None = None,
    store: str | os.PathLike[str] | None = None,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
    as_of: pd.Timestamp | None = None,
    clock_start: str | None = None,
) -> Inputs:
    """Load and verify every input of a report (reads files; everything after is pure).

    With ``store``, ``logs`` (may be empty) are ingested into it first, and the stored records
    are verified again with ``secrets_path`` where it changed since they were (the store is then
    written even without ``logs``; ``notes`` says so); then every stored delivery received from
    ``start`` minus the lookback up to ``as_of`` (default ``end``) is read from it
    (:func:`audit.ingest.query.load_analysis_inputs`); ``files`` lists the store's files.
    Without ``store``, the logs are verified on every core as ``audit analyze`` reads them
    (:func:`audit.ingest.verdicts.read_logs`: no body kept, except those of the records that
    are not valid, the report's evidence), up to ``as_of`` (default ``end``, else all);
    ``start`` is not used.

    Raises
    ------
    InputError
        No log given (and no store), or a path that does not exist or cannot be read (one line
        naming it); a store whose records need verifying again that this user cannot write.
    """
    if not logs and store is None:
        raise InputError("give at least one capture file, folder or glob")
    secrets_file = Path(secrets_path).expanduser()
    if not secrets_file.is_file():
        raise InputError(f"{secrets_file}: the secrets file does not exist")
    secrets = read_secrets(secrets_file)
    # The small inputs first: a bad one is told before the long read (and its side process).
    subs = load_snapshots(list(snapshots))
    if client_id:
        subs = subs[subs["client_id"] == client_id].reset_index(drop=True)
    mutes = read_mutes(Path(mutes_path)) if mutes_path else None
    if store is None:
        got = read_logs(
            list(logs),
            secrets,
            columns=ANALYSIS_COLUMNS,
            header_prefix=header_prefix,
            upto=as_of if as_of is not None else end,
            evidence=True,
        )
        deliveries, listed, evidence = got.rows, got.inputs, got.evidence
        first: FirstReceipts | None = None
        ahead: Pending[Takedown] | None = None
        notes: tuple[str, ...] = ()
        del got
    else:
        stored = _from_store(
            store,
            _Given(logs=logs, secrets_file=secrets_file, header_prefix=header_prefix),
            start,
            end,
            as_of,
            clock_start,
        )
        deliveries, listed, evidence = stored.deliveries, stored.files, stored.evidence
        first, ahead, notes = stored.first_receipts, stored.takedown, stored.notes
        del stored
    rows = [listed.assign(kind="capture log")]
    extra = [("secrets", secrets_file.resolve(), False)]
    extra += [("snapshot", p, True) for p in (snapshot_files(snapshots) if snapshots else [])]
    if mutes_path:
        extra.append(("mutes", Path(mutes_path).resolve(), True))
    for kind, path, hashed in extra:
        blob = path.read_bytes()
        rows.append(
            pd.DataFrame(
                [
                    {
                        "source": source_name(path),
                        "size": len(blob),
                        "sha256": _sha256(blob) if hashed else "",
                        "kind": kind,
                    }
                ]
            )
        )
    files = pd.concat(rows, ignore_index=True)
    # Counts of capture logs only: whole numbers, empty for the other files (not 150.0).
    files = files.astype({"records": "Int64", "unreadable": "Int64"})
    return Inputs(
        deliveries,
        subs,
        files,
        secrets.latest_valid_from(),
        mutes,
        evidence,
        first,
        ahead,
        notes=notes,
        secrets_file=os.fspath(secrets_path),
    )


class _Given(NamedTuple):
    """What a store is brought up to date with: logs to ingest, the secrets file and the
    header prefix."""

    logs: Sequence[str | os.PathLike[str]]
    secrets_file: Path
    header_prefix: str


def _store_up_to_date(store: str | os.PathLike[str], given: _Given) -> tuple[str, ...]:
    """Ingest ``logs`` into ``store``; without logs, verify again
    (:func:`audit.ingest.store.reverify`) the stored records of the subscriptions whose secrets
    differ from those the store was verified with, so that the report never reads verdicts of
    other secrets. Nothing is written when nothing changed (a store this user cannot write is read
    then); the lines to tell the user."""
    logs, secrets_file, prefix = given.logs, given.secrets_file, given.header_prefix
    if logs:
        done = ingest(list(logs), secrets_file, store, header_prefix=prefix)
        return tuple(f"{store}: {line}" for line in done.messages)
    again = reverify(store, secrets_file, header_prefix=prefix)
    return () if again is None else _reverified_notes(store, again)


def _reverified_notes(store: str | os.PathLike[str], done: IngestResult) -> tuple[str, ...]:
    """What an ingest with no files did, for the user: it wrote to the store."""
    lines = [f"{store}: {line}" for line in done.messages]
    lines.append(f"{store}: {WRITTEN}")
    return tuple(lines)


class _Stored(NamedTuple):
    """What :func:`_from_store` reads from an evidence store."""

    deliveries: pd.DataFrame
    files: pd.DataFrame
    evidence: pd.DataFrame
    first_receipts: FirstReceipts | None
    takedown: Pending[Takedown] | None
    notes: tuple[str, ...]


def _from_store(
    store: str | os.PathLike[str],
    given: _Given,
    start: pd.Timestamp | None,
    end: pd.Timestamp | None,
    as_of: pd.Timestamp | None,
    clock_start: str | None,
) -> _Stored:
    """Bring ``store`` up to date (:func:`_store_up_to_date`), then read the period's
    deliveries, the file list, the evidence of the records that are not valid and the incident
    fold's first receipts (with ``clock_start``: the takedown analysis made of them beside the
    rest, pending)."""
    upto = as_of if as_of is not None else end
    if upto is None:
        raise ParameterError("reading a store needs the period's end or as_of")
    notes = _store_up_to_date(store, given)
    # With clock_start, the takedown analysis runs on the other core while the deliveries are read.
    got = read_store(store, start=start, end=upto, clock_start=clock_start)
    # A rejected request's signature, headers and body are the report's evidence (as from raw
    # captures); the store reads them for those few records only, kept apart from the
    # deliveries (with a body column, the analyses would look for every body).
    lo = None if start is None else start - ATTEMPT_LOOKBACK
    with cancelled_on_error(got.takedown):
        evidence = not_valid_evidence(store, start=lo, end=upto)
    return _Stored(got.deliveries, got.inputs, evidence, got.first_receipts, got.takedown, notes)
