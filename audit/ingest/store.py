"""The evidence store: captures verified once, kept as Hive-partitioned Parquet.

Layout (plain files; DuckDB, Polars, Spark and Trino read it)::

    STORE/
      manifest.json                       files ingested, parts, secret fingerprints, settings
      deliveries/month=2026-10/part-*.parquet
      deliveries/month=none/part-*.parquet   unreadable records that have no receipt time
      .lock                               one writer at a time

Rules
-----
* A file is known by the sha256 of its content (a gzip file's inflated content:
  ``audit.ingest.identity``): ingesting it again under any path, compressed or not, does
  nothing, and a stored file that was renamed or compressed is then known by its new path.
  A plain JSONL file that grew (its stored content is a prefix of the new one, ending at a line
  end) ingests only the new lines. Any other change (rewritten, truncated, copytruncated) adds
  the new version's records and keeps the earlier one's: nothing stored is ever deleted.
* A record is known by ``record_sha256`` (``audit.ingest.record_id``): one already stored is
  not stored again (``audit.ingest.known_records``), so readers count each once. An unreadable
  line of a JSON Lines log is known by its bytes
  (:func:`audit.ingest.identity.unreadable_line_hashes`): the same torn line in a rewritten
  version of its log is stored once.
* Each part's sha256 and rows are in the manifest (format 2, ``audit.ingest.store_folder``)
  and checked before it is read. An ingest given the capture file of a damaged or missing part
  reads it again (a repair); a store of format 1 is upgraded in place (``audit.ingest.upgrade``).
* The manifest keeps, per subscription, a keyed fingerprint of the secrets it verified with
  (HMAC-SHA256 keyed by each secret, of a fixed label; never a value or a plain hash). When the
  secrets file changes, the records those subscriptions could match are verified again at the
  next ingest (records whose subscription was inferred are always among them).
* One writer at a time: an OS lock on ``.lock``; a second ingest waits. Parts are written under
  ``.staging/`` and renamed into place, and the manifest (written last, atomically) lists the
  parts that count: a reader that goes by the manifest never sees a half-written ingest, and a
  crashed ingest's stray parts are removed by the next one.
* No stage holds a whole file: JSONL is read, verified and written in chunks.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.atomic import write_json_atomic
from audit.errors import InputError
from audit.ingest import parallel, quoted_secrets, records
from audit.ingest.fast import verify_jsonl
from audit.ingest.identity import Seen, follow, identify, moved_away, unreadable_line_hashes
from audit.ingest.known_records import KnownRecords
from audit.ingest.load import LoadWarning, expand_paths
from audit.ingest.parts import PartWriter, Staged
from audit.ingest.reverify import reverify_parts
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.store_folder import (
    DATASET,
    FORMAT,
    check_folder,
    check_parts,
    damaged_parts,
    load_manifest,
    publish,
    remove_strays,
    staging_folder,
)
from audit.ingest.upgrade import upgrade
from audit.ingest.workers import workers_for
from audit.locks import folder_held, lock_file, try_lock_file, unlock_file
from audit.paths import source_name
from audit.progress import Progress, counting
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX, header_names

__all__ = ["WRITTEN", "IngestResult", "Store", "ingest", "reverify", "secrets_fingerprints"]

#: The store format this release writes (``manifest.json``'s ``version``).
STORE_VERSION = FORMAT
_LABEL = b"audit evidence store: secret fingerprint v1"
#: The line that tells a user :func:`reverify` wrote to the store.
WRITTEN = "written: the new verdicts are stored (an ingest with no files)"


def secrets_fingerprints(store: SecretStore) -> dict[str, str]:
    """Per subscription: sha256 over each secret's keyed fingerprint and ``valid_from``.

    The fingerprint of one secret is HMAC-SHA256(key=secret, msg=fixed label): it changes when
    the secret changes and reveals nothing that would help guess it.
    """
    out = {}
    for sub, items in sorted(store.by_subscription.items()):
        h = hashlib.sha256()
        for s in items:
            h.update(hmac.digest(s.key, _LABEL, hashlib.sha256))
            h.update(str(s.valid_from_ns).encode("ascii") + b";")
        out[sub] = h.hexdigest()
    return out


@dataclass
class IngestResult:
    """What one ingest did: counts and one line per notable event (changed files...)."""

    files_added: int = 0
    files_unchanged: int = 0
    files_grown: int = 0
    files_changed: int = 0
    records: int = 0
    unreadable: int = 0
    reverified: int = 0
    naive_times: int = 0
    messages: list[str] = field(default_factory=list)
    #: The manifest entries (resolved paths) that hold the files given, in order.
    paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Store:
    """A store folder. :meth:`parts` lists the parts the manifest counts (a consistent view),
    each checked against the sha256 the manifest records before it is first listed."""

    root: Path
    #: The parts found whole so far (checked once per Store object).
    checked: set[str] = field(default_factory=set, compare=False, repr=False)

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def manifest(self) -> dict[str, Any]:
        """The manifest (an empty store's when there is none yet)."""
        if self.manifest_path.is_symlink():
            raise InputError(f"{self.manifest_path}: a symbolic link; a store's is a plain file")
        if not self.manifest_path.is_file():
            return {"version": STORE_VERSION, "files": [], "secrets": {}}
        try:
            text = self.manifest_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{self.manifest_path}: not a store manifest ({e})") from None
        return load_manifest(text, self.manifest_path)

    def parts(
        self,
        months: Iterable[str] | None = None,
        paths: Iterable[str] | None = None,
        *,
        check: bool = True,
    ) -> list[Path]:
        """Part files listed in the manifest, optionally only those of some months and of
        some ingested files (resolved paths, as :attr:`IngestResult.paths` gives them).

        ``check``: each is first checked against the sha256 the manifest records (one
        streaming read per part and Store object): a damaged one is a
        :class:`~audit.ingest.store_folder.DamagedPart` error that names it."""
        wanted = None if months is None else {f"month={m}" for m in months}
        files = None if paths is None else set(paths)
        manifest = self.manifest()
        names = []
        for entry in manifest["files"]:
            if files is not None and entry["path"] not in files:
                continue
            for part in entry["parts"]:
                if wanted is None or part["name"].split("/")[0] in wanted:
                    names.append(part["name"])
        if check:
            check_parts(self.root, manifest, names, self.checked)
        return sorted(self.root / DATASET / name for name in names)

    def secrets_changed(self, secrets: SecretStore) -> list[str]:
        """The subscriptions (sorted) whose secrets differ, by keyed fingerprint
        (:func:`secrets_fingerprints`), from those the stored records were verified with: the
        ones an ingest verifies again. None for a store that holds no file."""
        return _changed(self.manifest(), secrets_fingerprints(secrets))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's writer lock (blocks while another writer holds it, and says so).

        Two locks: on the store folder itself (nothing to delete) and on ``.lock`` (where a
        folder cannot be locked: NFS). Deleting ``.lock`` no longer lets two writers in."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._file_lock(), folder_held(self.root):
            yield

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.root / ".lock", flags, 0o600)
        except OSError as e:
            lock = self.root / ".lock"
            raise InputError(f"{lock}: cannot open the store's lock ({e.strerror})") from None
        with open(fd, "a+b") as f:
            if not try_lock_file(f):
                waiting = f"{self.root}: another ingest is writing; waiting for it"
                warnings.warn(waiting, LoadWarning, stacklevel=3)
                lock_file(f)
            try:
                yield
            finally:
                unlock_file(f)


def _changed(manifest: dict[str, Any], fps: dict[str, str]) -> list[str]:
    """The subscriptions whose fingerprint in ``fps`` is not the one ``manifest`` records
    (none when it lists no file: there is nothing to verify again)."""
    if not manifest["files"]:
        return []
    then = manifest["secrets"]
    return sorted(s for s in set(fps) | set(then) if fps.get(s) != then.get(s))


def reverify(
    store_dir: str | os.PathLike[str],
    secrets_path: str | os.PathLike[str],
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> IngestResult | None:
    """Verify again, with ``secrets_path``, the stored records whose secrets changed
    (:meth:`Store.secrets_changed`: an ingest with no files); None when none did, and then
    nothing is written, so a store this user cannot write is read as it is.

    Raises
    ------
    InputError
        The secrets changed and this user cannot write the store (one line: who can fix it).
    """
    store = Store(Path(store_dir))
    changed = store.secrets_changed(read_secrets(secrets_path))
    if not changed:
        return None
    try:
        for at in (store.root, store.manifest_path):
            if not os.access(at, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(at))
        return ingest(
            [], secrets_path, store.root, header_prefix=header_prefix, tolerance_s=tolerance_s
        )
    except PermissionError as e:  # os.access said so, or a file in the folder refused
        raise InputError(
            f"{store_dir}: the secrets of {len(changed)} subscription(s) changed since its "
            f"records were verified; verifying them again writes to the store, which this user "
            f"cannot ({e.strerror or 'permission denied'}): have its owner run "
            f"`audit ingest --store {store_dir} --secrets FILE`, or work from a writable copy"
        ) from None


#: The bytes of a capture file verified and written at a time (a piece: one worker's task),
#: unless ``ingest(chunk_bytes=...)`` says.
PIECE_BYTES = 32 * 2**20


def ingest(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str],
    store_dir: str | os.PathLike[str],
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    chunk_bytes: int | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Load and verify capture logs once, into the evidence store at ``store_dir``.

    ``progress`` counts the files as each is done and the records read as each piece of a
    file is verified (default: nothing is counted or shown).

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> from audit.ingest.signatures import sign
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> body = '{"id": "evt_1", "event": "incident.created", "data": {}}'
    >>> headers = {"X-PhishFort-Signature": sign("whsec_demo", 1790812800, body.encode()),
    ...            "X-PhishFort-Timestamp": "1790812800"}
    >>> rec = {"received_at": "2026-10-01T00:00:01Z", "subscription_id": "wh_1",
    ...        "headers": headers, "body": body}
    >>> _ = (tmp / "log.jsonl").write_text(json.dumps(rec) + "\\n")
    >>> _ = (tmp / "secrets.json").write_text('{"wh_1": [{"secret": "whsec_demo"}]}')
    >>> (tmp / "secrets.json").chmod(0o600)
    >>> r = ingest([tmp / "log.jsonl"], tmp / "secrets.json", tmp / "store", workers=1)
    >>> r.records, r.files_added, r.unreadable
    (1, 1, 0)
    >>> ingest([tmp / "log.jsonl"], tmp / "secrets.json", tmp / "store", workers=1).files_unchanged
    1
    """
    files = expand_paths(logs)
    secrets = read_secrets(secrets_path)
    tally = counting(progress)
    tally.expect_files(len(files))
    settings = _Settings(
        wanted={v: k for k, v in header_names(header_prefix).items()},
        secrets=secrets,
        tolerance_s=tolerance_s,
        chunk_bytes=chunk_bytes or PIECE_BYTES,
        workers=workers,
        progress=tally,
    )
    store = Store(Path(store_dir))
    result = IngestResult()
    check_folder(store.root, creating=bool(files))
    with store.lock():
        check_folder(store.root, creating=bool(files))  # again, now that no writer runs
        manifest = store.manifest()
        _check_settings(store, manifest, header_prefix, tolerance_s)
        remove_strays(store.root, manifest)
        before = {p["name"] for e in manifest["files"] for p in e["parts"]}
        if not store.manifest_path.exists():  # a first ingest: the store exists from now on,
            write_json_atomic(store.manifest_path, manifest)  # so a crash leaves only strays
        staging = staging_folder(store.root)
        try:
            obsolete: list[str] = []
            # Every file's content first: which stored content still lies in a given file
            # (under its name or another: rotated, copied) does not depend on their order.
            seen = {path: identify(path, manifest) for path in files}
            holds = {v.resolved: v.sha for v in seen.values()}
            given = {v: k for k, v in reversed(holds.items())}  # a content's first given path
            contents = _Contents(holds, given)
            if manifest["version"] != FORMAT:  # an earlier release's store: rewritten first
                at_hand = {v.sha: p for p, v in seen.items()}  # checks and repairs its parts
                result.messages.extend(upgrade(store.root, manifest, staging, obsolete, at_hand))
            known = KnownRecords(store.root, manifest)
            fps = secrets_fingerprints(secrets)
            changed_subs = set(_changed(manifest, fps))
            if changed_subs:
                again = reverify_parts(
                    store.root,
                    manifest,
                    changed_subs,
                    secrets,
                    tolerance_s,
                    staging,
                    obsolete,
                    progress=tally,
                )
                known.forget(again.replaced)
                result.reverified = again.records
                result.messages.append(
                    f"secrets changed for {len(changed_subs)} subscription(s): "
                    f"{result.reverified} record(s) verified again"
                )
                result.messages.extend(again.messages)
            manifest["secrets"] = fps
            with parallel.Runner(
                wanted=settings.wanted,
                secrets=secrets,
                tolerance_s=tolerance_s,
                workers=_workers(seen.values(), manifest, settings, workers),
            ) as runner:
                settings = replace(settings, runner=runner)
                for path in files:
                    done = _ingest_file(
                        path,
                        seen[path],
                        contents,
                        store,
                        _Target(manifest, known, staging),
                        settings,
                    )
                    _tally(result, done)
                    obsolete.extend(done.obsolete)
                    tally.file_done()
            quoted_secrets.update(store.root, manifest, before, secrets)
            write_json_atomic(store.manifest_path, manifest)
        except BaseException:  # a full disk, ^C: the parts of this run go, the store stays
            remove_strays(store.root, store.manifest())
            raise
        for part in obsolete:
            (store.root / DATASET / part).unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
    return result


@dataclass(frozen=True)
class _Settings:
    """What every file of one ingest is read and verified with."""

    wanted: dict[str, str]
    secrets: SecretStore
    tolerance_s: float
    chunk_bytes: int
    workers: int | None
    #: The command's runner (its workers forked once, when a first piece is read).
    runner: parallel.Runner | None = None
    #: Counts records as each piece is finished (files are counted by :func:`ingest`).
    progress: Progress = field(default_factory=Progress)


@dataclass(frozen=True)
class _Target:
    """Where :func:`_ingest_file` writes: the manifest (edited in place), the records the
    store holds (not stored again) and the staging folder."""

    manifest: dict[str, Any]
    known: KnownRecords
    staging: Path


@dataclass(frozen=True)
class _Contents:
    """Every given file's content (sha256) by resolved path, and its first given path by
    content: an entry whose content moved to another given file follows it."""

    holds: dict[str, str]
    given: dict[str, str]


@dataclass
class _FileIngested:
    """What :func:`_ingest_file` did with one file (the manifest is edited in place)."""

    #: The manifest entry (resolved path) that holds the file.
    path: str
    outcome: Literal["added", "unchanged", "grown", "changed"]
    records: int = 0
    unreadable: int = 0
    naive_times: int = 0
    messages: list[str] = field(default_factory=list)
    #: Parts (dataset-relative names) to delete once the manifest no longer lists them.
    obsolete: list[str] = field(default_factory=list)


def _workers(
    seen: Iterable[Seen], manifest: dict[str, Any], settings: _Settings, workers: int | None
) -> int:
    """Worker processes for an ingest: ``workers`` when the caller says; else none (this
    process) unless a file to read is cut into several pieces. Files are stored one after the
    other, so a file of one piece keeps one worker busy while the others wait: 31 files of 1.2
    MB (36 MB) ingested in 2.2 s in process against 2.7 s on 2 workers. Then
    :func:`audit.ingest.workers.workers_for` of the bytes to read (``AUDIT_JOBS``)."""
    if workers is not None:
        return max(1, workers)
    stored = {e["sha256"] for e in manifest["files"]}
    new = [v.size for v in seen if v.sha not in stored]
    if not any(size > settings.chunk_bytes for size in new):
        return 1
    return workers_for(sum(new))


def _tally(result: IngestResult, done: _FileIngested) -> None:
    """Add one file's outcome to ``result``."""
    result.messages.extend(done.messages)
    result.paths.append(done.path)
    if done.outcome == "added":
        result.files_added += 1
    elif done.outcome == "unchanged":
        result.files_unchanged += 1
    elif done.outcome == "grown":
        result.files_grown += 1
    else:
        result.files_changed += 1
    result.records += done.records
    result.unreadable += done.unreadable
    result.naive_times += done.naive_times


def _check_settings(
    store: Store, manifest: dict[str, Any], header_prefix: str, tolerance_s: float
) -> None:
    for key, value in (("header_prefix", header_prefix), ("tolerance_s", tolerance_s)):
        old = manifest.setdefault(key, value)
        if old != value:
            raise InputError(
                f"{store.root}: the store was built with {key} {old!r}, not {value!r}; "
                "use another store"
            )


def _ingest_file(
    path: Path,
    seen: Seen,
    contents: _Contents,
    store: Store,
    target: _Target,
    settings: _Settings,
) -> _FileIngested:
    """Ingest one file into ``target`` (the manifest's entries edited in place); what was
    done. Nothing stored is deleted: a damaged part is replaced by its records read again, a
    changed file's earlier entry stays (under ``PATH (earlier content; sha256 …)``)."""
    manifest, staging = target.manifest, target.staging
    resolved, sha = seen.resolved, seen.sha
    messages: list[str] = []
    obsolete: list[str] = []
    old = next((e for e in manifest["files"] if e["path"] == resolved), None)
    same = next((e for e in manifest["files"] if e["sha256"] == sha), None)
    damaged = damaged_parts(store.root, same) if same is not None else []
    if same is not None and damaged:  # this file's records read again, in its entry's place
        name, why = damaged[0]
        messages.append(
            f"{path}: {len(damaged)} of its stored part(s) damaged or missing ({name}: {why}); "
            f"repaired: its {same['records']} record(s) read again from this file"
        )
        gone = [p["name"] for p in same["parts"]]
        obsolete.extend(gone)
        target.known.forget(gone)
        manifest["files"].remove(same)
        old, same = (None if old is same else old), None
    if same is not None:
        if same["path"] != resolved and _gone_from(same["path"], sha, contents.holds):
            # renamed or compressed since (log rotation): the entry follows its content
            messages.append(f"{path}: already stored as {same['path']}; renamed since")
            follow(manifest, same, resolved)
        return _FileIngested(same["path"], "unchanged", messages=messages, obsolete=obsolete)
    skip, first_line, entry = 0, 1, None
    outcome: Literal["added", "grown", "changed"]
    moved_to = contents.given.get(old["sha256"], resolved) if old is not None else resolved
    earlier = None
    if old is not None and seen.prefix_sha == old["sha256"] and seen.at_newline:
        skip, first_line, entry = old["size"], old["lines"] + 1, old
        outcome = "grown"
        messages.append(f"{path}: grew; ingesting from line {first_line}")
    elif old is not None and moved_to != resolved:  # its stored content is in another file
        messages.append(f"{path}: its stored content is now {moved_to}")
        follow(manifest, old, moved_to)
        outcome = "added"
    elif old is not None:  # rewritten, truncated, copytruncated: its records stay
        outcome, earlier = "changed", old
        old["path"] = f"{resolved} (earlier content; sha256 {old['sha256'][:16]})"
    elif damaged:
        outcome = "changed"
    else:
        outcome = "added"
    done = _FileIngested(resolved, outcome, messages=messages, obsolete=obsolete)
    newlines, written = _read_file(path, seen, skip, first_line, staging, settings, done)
    if seen.fmt.SPLITS_AT_LINES:  # an unreadable line is known by its bytes, not its place
        written = _unreadable_by_their_lines(path, written, staging, sha[:16], skip, first_line)
    own = {p["name"] for p in entry["parts"]} if entry is not None else set()
    kept = target.known.keep(written, staging, sha[:16], own)
    done.records -= kept.known
    done.unreadable -= kept.known_unreadable
    parts = publish(store.root, kept.parts)
    if earlier is not None:
        messages.append(
            f"{path}: changed since it was ingested: {done.records} new record(s) stored, "
            f"{kept.known} already stored; the {earlier['records']} record(s) of its earlier "
            "content kept"
        )
    elif kept.known:
        messages.append(f"{path}: {kept.known} record(s) already stored, not stored again")
    if entry is None:
        entry = {"path": resolved, "records": 0, "unreadable": 0, "lines": 0, "parts": []}
        manifest["files"].append(entry)
    entry.update(sha256=sha, size=seen.size, gzip=seen.gz)
    entry["records"] += done.records
    entry["unreadable"] += done.unreadable
    entry["lines"] += newlines
    entry["parts"] = [*entry["parts"], *parts]
    if kept.known or "held" in entry:  # its records stored under other entries (read_held)
        entry["held"] = entry.get("held", 0) + kept.known
    return done


def _read_file(
    path: Path,
    seen: Seen,
    skip: int,
    first_line: int,
    staging: Path,
    settings: _Settings,
    done: _FileIngested,
) -> tuple[int, list[Staged]]:
    """Read and verify ``path`` from byte ``skip`` into staged parts, counting into ``done``;
    (the lines read, the staged parts). Rows name the file by its resolved path, as its manifest
    entry does (``store_inputs``), whatever spelling was given (``docs/scale.md``)."""
    fmt, sha = seen.fmt, seen.sha
    source = source_name(seen.resolved)
    newlines = 0
    written: list[Staged] = []
    if not fmt.SPLITS_AT_LINES:
        writer = PartWriter(staging, sha[:16])
        table, naive = records.verify_chunk(
            records.read_whole(path),
            kind=fmt.NAME,
            source=source,
            first_line=1,
            wanted=settings.wanted,
            secrets=settings.secrets,
            tolerance_s=settings.tolerance_s,
            file_sha256=sha,
        )
        writer.write(table)
        written = writer.finish()
        done.records += table.num_rows
        settings.progress.add_records(table.num_rows)
        done.unreadable += pc.sum(pc.equal(table.column("verdict"), "unreadable")).as_py() or 0
        done.naive_times += naive
        return newlines, written
    pieces = parallel.plan_pieces(
        path, piece_bytes=settings.chunk_bytes, skip_bytes=skip, first_line=first_line
    )
    assert settings.runner is not None  # set by ingest() for the whole command
    results = settings.runner.map(
        _ingest_piece,
        pieces,
        sources={str(path): source},
        call={"staging": staging, "file_sha256": sha},
    )
    with contextlib.closing(results):  # an error here stops the workers at once
        for piece in results:
            written.extend(piece.parts)
            done.records += piece.rows
            settings.progress.add_records(piece.rows)
            done.unreadable += piece.unreadable
            done.naive_times += piece.naive_times
            newlines += piece.newlines
    return newlines, written


def _unreadable_by_their_lines(
    path: Path, written: list[Staged], staging: Path, stem: str, skip: int, first_line: int
) -> list[Staged]:
    """``written`` with the ``record_sha256`` of its unreadable records made that of their
    lines' bytes (:func:`unreadable_line_hashes`): the staged parts holding any are written
    again."""
    where: dict[int, pa.Table] = {}
    for i, part in enumerate(written):
        table = pq.read_table(part.path, columns=["verdict", "line"])
        if pc.any(pc.equal(table.column("verdict"), "unreadable")).as_py():
            where[i] = table
    if not where:
        return written
    lines = {
        n
        for t in where.values()
        for v, n in zip(t.column("verdict").to_pylist(), t.column("line").to_pylist(), strict=True)
        if v == "unreadable"
    }
    by_line = unreadable_line_hashes(path, lines, skip_bytes=skip, first_line=first_line)
    out: list[Staged] = []
    for i, part in enumerate(written):
        if i not in where:
            out.append(part)
            continue
        table = pq.read_table(part.path)
        hashes = table.column("record_sha256").to_pylist()
        verdicts = table.column("verdict").to_pylist()
        for j, (v, n) in enumerate(zip(verdicts, table.column("line").to_pylist(), strict=True)):
            if v == "unreadable" and n in by_line:
                hashes[j] = by_line[n]
        at = table.schema.get_field_index("record_sha256")
        table = table.set_column(at, table.schema.field(at), pa.array(hashes, pa.string()))
        part.path.unlink()
        writer = PartWriter(staging, stem)
        writer.write(table)
        out.extend(writer.finish())
    return out


def _gone_from(path: str, sha: str, holds: dict[str, str]) -> bool:
    """Whether the file at ``path`` no longer holds the content ``sha`` (a given file is known
    by what :func:`~audit.ingest.identity.identify` read; another is read again)."""
    return holds[path] != sha if path in holds else moved_away(path, sha)


class _PieceWritten(NamedTuple):
    """What :func:`_ingest_piece` did with one piece."""

    #: The staged parts.
    parts: list[Staged]
    rows: int
    unreadable: int
    naive_times: int
    newlines: int


def _ingest_piece(piece: parallel.Piece) -> _PieceWritten:
    """Worker: verify one piece and write its rows as staged parts (bodies stay here)."""
    c = parallel._CONTEXT
    data = piece.read()
    got = verify_jsonl(
        data,
        c["source"][piece.path],
        c["wanted"],
        piece.first_line,
        c["secrets"],
        tolerance_s=c["tolerance_s"],
        keyed=c["keyed"],
        extract=True,
        overlong=piece.overlong,
    )
    table = records.stored_table(got.columns, c["file_sha256"])
    writer = PartWriter(c["staging"], c["file_sha256"][:16])
    writer.write(table)
    return _PieceWritten(
        writer.finish(), table.num_rows, got.unreadable, got.naive_times, data.count(b"\n")
    )
