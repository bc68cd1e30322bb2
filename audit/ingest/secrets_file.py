"""Writing the secrets file: new secrets merged in under an OS lock, written whole.

Writers lock ``<file>.lock`` beside the real file (``fcntl.flock``), re-read the file under the
lock and merge, so concurrent rotations all keep their secret. A secrets file given as a
symbolic link is updated at its target, which keeps mode 0600. The reader is
:mod:`audit.ingest.secrets`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
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

__all__ = ["CLOCK_BEHIND_S", "add_secret"]


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive OS lock on ``<target>.lock`` (created 0600, never a symlink)."""
    lock = target.with_name(target.name + ".lock")
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock, flags, 0o600)
    except OSError as e:
        raise SecretsError(f"{lock}: cannot open the lock file ({e.strerror})") from None
    try:
        if fcntl is not None:
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


def add_secret(
    path: str | os.PathLike[str], subscription_id: str, secret: str, valid_from: datetime
) -> None:
    """Add a newly issued secret to the secrets file, atomically, under a lock, mode 0600.

    The file is created when missing. Existing entries (including ``secret_env`` ones) are kept
    as written. The file is re-read under an exclusive lock and the new entry merged in, so
    concurrent writers never lose each other's secrets; entries stay ordered by ``valid_from``
    (a tie moves the new one 1 microsecond later). A new secret more than
    :data:`CLOCK_BEHIND_S` older than the newest one already saved is refused (the clock is
    behind, and the secret would look replaced). A symbolic link is followed: the target is
    rewritten (temporary file, then rename) and the link kept.
    """
    if valid_from.tzinfo is None:
        raise ValueError("valid_from must be timezone-aware")
    target = real_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target):
        data: dict[str, Any] = {}
        if target.exists():
            try:  # a regular file of at most 16 MiB, as the reader takes
                raw = read_regular(target, what="secrets file", error=SecretsError)
                text = raw.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                raise SecretsError(f"{target}: existing secrets file cannot be read") from None
            loaded = load_secrets_json(text, target) if text.strip() else {}
            if not isinstance(loaded, dict):
                raise SecretsError(
                    f"{target}: expected an object mapping subscription id to a list"
                )
            data = loaded
        entries = data.setdefault(subscription_id, [])
        if not isinstance(entries, list):
            raise SecretsError(f"{target}: {subscription_id!r} must map to a list of secrets")
        _merge(target, subscription_id, entries, secret, valid_from)
        write_json_atomic(target, _plain(data), mode=0o600)


#: How far (seconds) a new secret's time may lie before the newest saved one: concurrent
#: rotations finish in any order; beyond this the clock is behind.
CLOCK_BEHIND_S = 600


def _merge(p: Path, sub: str, entries: list[Any], secret: str, valid_from: datetime) -> None:
    times: list[int | None] = []
    for i, item in enumerate(entries):
        vf = item.get("valid_from") if isinstance(item, dict) else None
        try:
            times.append(None if vf is None else parse_iso_ns(vf)[0])
        except ValueError:
            raise SecretsError(f"{p}: {sub!r} entry {i + 1}: bad 'valid_from'") from None
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
    entries.insert(pos, {"secret": secret, "valid_from": _stamp_ns(new_ns)})


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
