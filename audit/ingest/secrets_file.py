"""Writing the secrets file: new secrets merged in under an OS lock, written whole.

Writers lock ``<file>.lock`` beside the real file (``fcntl.flock``), re-read the file under the
lock and merge, so concurrent rotations all keep their secret. :func:`held_secrets` keeps the
lock for as long as the caller needs it: ``audit webhooks rotate-secret`` holds it across its
call to the service, so that rotations from one machine are serialised and the file's order is
the service's. A secrets file given as a symbolic link is updated at its target, which keeps
mode 0600. The reader is :mod:`audit.ingest.secrets`.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # no fcntl on Windows: None says so

from audit.atomic import real_target, write_json_atomic
from audit.errors import SecretsError
from audit.ingest.secrets import load_secrets_json
from audit.paths import read_regular
from audit.timeutil import parse_iso_ns

__all__ = ["CLOCK_BEHIND_S", "HeldSecrets", "add_secret", "held_secrets"]


@contextlib.contextmanager
def _locked(target: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive OS lock on ``<target>.lock`` (created 0600, never a symlink).

    ``on_wait`` is called once when another holder makes this one wait. The lock belongs to
    the open file description: a second ``_locked`` of the same file in the same process
    waits for the first, so take it once (:func:`held_secrets`) and pass it on.
    """
    lock = target.with_name(target.name + ".lock")
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock, flags, 0o600)
    except OSError as e:
        raise SecretsError(f"{lock}: cannot open the lock file ({e.strerror})") from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
        else:  # pragma: no cover - Windows: a byte-range lock, retried until granted
            import msvcrt  # platform: Windows only

            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
        yield
    finally:
        os.close(fd)  # closing releases the lock


@dataclass
class HeldSecrets:
    """The secrets file as read under its lock (see :func:`held_secrets`).

    Attributes
    ----------
    target : Path
        The file written (a symbolic link resolved).
    data : dict
        The decoded file, ``{}`` when it did not exist or was empty; :meth:`add` changes it,
        :meth:`write` saves it.
    existed : bool
        Whether the file existed when the lock was taken.
    """

    target: Path
    data: dict[str, Any] = field(repr=False)
    existed: bool

    def holds(self, subscription_id: str) -> bool:
        """Whether the file names ``subscription_id``."""
        return subscription_id in self.data

    def add(
        self, subscription_id: str, secret: str, valid_from: datetime, *, newest: bool = False
    ) -> str:
        """Merge a new secret into :attr:`data` (not yet written); return its ``valid_from``.

        By default the entry goes where its ``valid_from`` puts it (a tie moves it 1
        microsecond later), and a time more than :data:`CLOCK_BEHIND_S` before the newest
        saved one is refused (the clock is behind). With ``newest=True`` it is the newest
        secret whatever its time, as for a secret the service issued while the lock was held:
        it goes last, valid from ``valid_from`` or, when that is not later than the newest
        saved ``valid_from``, 1 microsecond after it (the file's order stays the service's).

        >>> saved = {"wh_1": [{"secret": "a", "valid_from": "2026-10-15T09:30:00Z"}]}
        >>> held = HeldSecrets(Path("s.json"), saved, existed=True)
        >>> held.add("wh_1", "b", datetime(2026, 10, 15, 9, 29, tzinfo=UTC), newest=True)
        '2026-10-15T09:30:00.000001Z'
        >>> held.add("wh_1", "c", datetime(2026, 10, 15, 9, 31, tzinfo=UTC), newest=True)
        '2026-10-15T09:31:00.000000Z'
        """
        if valid_from.tzinfo is None:
            raise ValueError("valid_from must be timezone-aware")
        entries = self.data.setdefault(subscription_id, [])
        if not isinstance(entries, list):
            raise SecretsError(f"{self.target}: {subscription_id!r} must map to a list of secrets")
        merge = _append_newest if newest else _merge
        return merge(self.target, subscription_id, entries, secret, valid_from)

    def check_add(self, subscription_id: str, valid_from: datetime) -> None:
        """Raise what :meth:`add` would raise for a secret valid from ``valid_from``, without
        changing anything: the check before asking the service for a secret (its entries,
        their ``valid_from``, the rule against a clock that is behind)."""
        trial = HeldSecrets(self.target, copy.deepcopy(self.data), self.existed)
        trial.add(subscription_id, "whsec_dry_run", valid_from)

    def write(self) -> Path:
        """Write :attr:`data` atomically (temporary file, then rename), mode 0600."""
        return write_json_atomic(self.target, _plain(self.data), mode=0o600)


@contextlib.contextmanager
def held_secrets(
    path: str | os.PathLike[str], *, on_wait: Callable[[], None] | None = None
) -> Iterator[HeldSecrets]:
    """Lock the secrets file, read it, and hold the lock until the ``with`` block ends.

    The folder is created when missing, and the lock file ``<file>.lock`` beside the file.
    Inside the block, :meth:`HeldSecrets.add` then :meth:`HeldSecrets.write` save new
    secrets; nobody else writes the file meanwhile (every writer of this module takes the
    lock). ``on_wait`` is called once if another writer holds the lock, before waiting.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "s.json"
    >>> with held_secrets(path) as held:
    ...     held.existed, held.holds("wh_1")
    ...     held.add("wh_1", "whsec_a", datetime(2026, 10, 15, 9, 30, tzinfo=UTC))
    ...     _ = held.write()
    (False, False)
    '2026-10-15T09:30:00.000000Z'
    >>> with held_secrets(path) as held:
    ...     held.existed, held.holds("wh_1")
    (True, True)
    """
    target = real_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target, on_wait):
        existed = target.exists()
        yield HeldSecrets(target, _read(target) if existed else {}, existed)


def _read(target: Path) -> dict[str, Any]:
    try:  # a regular file of at most 16 MiB, as the reader takes
        raw = read_regular(target, what="secrets file", error=SecretsError)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise SecretsError(f"{target}: existing secrets file cannot be read") from None
    loaded = load_secrets_json(text, target) if text.strip() else {}
    if not isinstance(loaded, dict):
        raise SecretsError(f"{target}: expected an object mapping subscription id to a list")
    return loaded


def add_secret(
    path: str | os.PathLike[str],
    subscription_id: str,
    secret: str,
    valid_from: datetime,
    *,
    newest: bool = False,
) -> str:
    """Add a newly issued secret to the secrets file, atomically, under a lock, mode 0600.

    The file is created when missing. Existing entries (including ``secret_env`` ones) are kept
    as written. The file is re-read under an exclusive lock and the new entry merged in, so
    concurrent writers never lose each other's secrets; entries stay ordered by ``valid_from``
    (a tie moves the new one 1 microsecond later). A new secret more than
    :data:`CLOCK_BEHIND_S` older than the newest one already saved is refused (the clock is
    behind, and the secret would look replaced); ``newest=True`` places it last instead (see
    :meth:`HeldSecrets.add`). A symbolic link is followed: the target is rewritten (temporary
    file, then rename) and the link kept. Returns the ``valid_from`` written.

    To save a secret the service issues while the file stays locked (so that concurrent
    rotations save in the service's order), use :func:`held_secrets` around the call.
    """
    if valid_from.tzinfo is None:
        raise ValueError("valid_from must be timezone-aware")
    with held_secrets(path) as held:
        written = held.add(subscription_id, secret, valid_from, newest=newest)
        held.write()
    return written


#: How far (seconds) a new secret's time may lie before the newest saved one: concurrent
#: rotations finish in any order; beyond this the clock is behind.
CLOCK_BEHIND_S = 600


def _times(p: Path, sub: str, entries: list[Any]) -> list[int | None]:
    """Each entry's ``valid_from`` in ns (None when absent); a bad one is an error."""
    times: list[int | None] = []
    for i, item in enumerate(entries):
        vf = item.get("valid_from") if isinstance(item, dict) else None
        try:
            times.append(None if vf is None else parse_iso_ns(vf)[0])
        except ValueError:
            raise SecretsError(f"{p}: {sub!r} entry {i + 1}: bad 'valid_from'") from None
    return times


def _merge(p: Path, sub: str, entries: list[Any], secret: str, valid_from: datetime) -> str:
    times = _times(p, sub, entries)
    new_ns = parse_iso_ns(_stamp(valid_from))[0]
    known = [t for t in times if t is not None]
    if known and new_ns < max(known) - CLOCK_BEHIND_S * 10**9:
        raise SecretsError(
            f"{p}: {sub!r} already has a secret valid from {_stamp_ns(max(known))}, long after "
            f"{_stamp_ns(new_ns)}; is the clock behind?"
        )
    while new_ns in known:
        new_ns += 1000
    pos = sum(1 for t in times if t is None or t < new_ns)
    stamp = _stamp_ns(new_ns)
    entries.insert(pos, {"secret": secret, "valid_from": stamp})
    return stamp


def _append_newest(p: Path, sub: str, entries: list[Any], secret: str, valid_from: datetime) -> str:
    known = [t for t in _times(p, sub, entries) if t is not None]
    new_ns = parse_iso_ns(_stamp(valid_from))[0]
    if known and new_ns <= max(known):
        new_ns = max(known) + 1000
    stamp = _stamp_ns(new_ns)
    entries.append({"secret": secret, "valid_from": stamp})
    return stamp


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _stamp_ns(ns: int) -> str:
    seconds, rest = divmod(ns, 10**9)
    return _stamp(datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000))


def _plain(value: object) -> object:
    """The decoded JSON as plain dicts and lists, for writing back."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
