"""The secrets file: each subscription's signing secrets in the order they were issued.

Format (documented in ``docs/formats.md``)::

    {"wh_1": [{"secret": "...", "valid_from": "2026-01-01T00:00:00Z"},
              {"secret_env": "WH1_NEW", "valid_from": "2026-10-15T09:30:00Z"}]}

A secret is current from its ``valid_from`` until the next one's. ``valid_from`` may be absent on
the first secret only (current since forever). Secret values never appear in a repr, a message or
an exception: errors name the subscription, the position and the variable instead.

A subscription named twice (or a field named twice in one entry) is an error: JSON's
last-key-wins rule would silently drop secrets. A file that group or others may access gives a
:class:`SecretsWarning` naming the file and its mode, as ssh does. Every secret value read is
registered with :func:`audit.redaction.register_sensitive`, so that messages never show it.

The writer, :func:`audit.ingest.secrets_file.add_secret`, lives beside this reader.
"""

from __future__ import annotations

import json
import os
import stat
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.errors import SecretsError
from audit.paths import read_regular
from audit.redaction import register_sensitive
from audit.text import NOT_TEXT, holds_lone_surrogate
from audit.timeutil import parse_iso_ns

__all__ = [
    "SecretStore",
    "SecretsWarning",
    "SigningSecret",
    "load_json_noting_repeats",
    "load_secrets_json",
    "read_secrets",
    "repeated_keys",
    "secret_values",
]


class SecretsWarning(UserWarning):
    """The secrets file can be read by other users (group or others have access)."""


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers which keys appeared more than once."""

    repeated: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    obj.repeated = []
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                obj.repeated.append(k)
            seen.add(k)
    return obj


def load_json_noting_repeats(text: str) -> object:
    """``json.loads``, with every object remembering the keys it names more than once (JSON
    keeps the last silently): see :func:`repeated_keys`. Shared by the mutes file reader."""
    return json.loads(text, object_pairs_hook=_object)


def repeated_keys(value: object) -> list[str]:
    """The keys a decoded object (:func:`load_json_noting_repeats`) named twice; [] otherwise."""
    return value.repeated if isinstance(value, _Object) else []


def load_secrets_json(text: str, p: Path) -> object:
    """Decode the file's JSON; a key named twice in one object is an error naming it."""
    try:
        raw = load_json_noting_repeats(text)
    except json.JSONDecodeError as e:
        # The position only: the message of json would quote the text, which holds secrets.
        raise SecretsError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise SecretsError(f"{p}: JSON nested too deeply") from None
    if holds_lone_surrogate(raw):
        raise SecretsError(f"{p}: {NOT_TEXT}")
    if isinstance(raw, _Object):
        if raw.repeated:
            raise SecretsError(
                f"{p}: subscription {raw.repeated[0]!r} is named twice; merge its secrets into "
                "one list (JSON keeps only the last)"
            )
        for sub, items in raw.items():
            for i, item in enumerate(items if isinstance(items, list) else []):
                if isinstance(item, _Object) and item.repeated:
                    field_name = item.repeated[0]
                    shown = repr(field_name) if field_name in _FIELDS else "a field"
                    raise SecretsError(f"{p}: {sub!r} entry {i + 1} names {shown} twice")
    return raw


_FIELDS = ("secret", "secret_env", "valid_from")


def _check_mode(p: Path) -> None:
    try:
        mode = p.stat().st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) and mode & 0o077:
        warnings.warn(
            f"{p}: secrets file is accessible by group or others (mode {stat.S_IMODE(mode):04o});"
            f" run: chmod 600 {p}",
            SecretsWarning,
            stacklevel=3,
        )


@dataclass(frozen=True)
class SigningSecret:
    """One issued secret. ``valid_from_ns`` is None for "since forever" (first secret only).

    ``until_ns`` is the next secret's ``valid_from_ns`` (None while it is the newest).
    The key bytes are hidden from ``repr``.
    """

    subscription_id: str
    index: int
    valid_from_ns: int | None
    until_ns: int | None
    key: bytes = field(repr=False)
    origin: str = "secret"  # "secret" or "env:<NAME>"

    @property
    def label(self) -> str:
        """``<subscription>#<n>``: the n-th issued secret (1-based); never the value."""
        return f"{self.subscription_id}#{self.index + 1}"

    def current_at(self, t_ns: int) -> bool:
        """Whether this secret was the subscription's current one at ``t_ns``."""
        after_start = self.valid_from_ns is None or t_ns >= self.valid_from_ns
        before_end = self.until_ns is None or t_ns < self.until_ns
        return after_start and before_end

    def replaced_before(self, t_ns: int) -> bool:
        """Whether a newer secret had replaced this one by ``t_ns``."""
        return self.until_ns is not None and t_ns >= self.until_ns


@dataclass(frozen=True)
class SecretStore:
    """Secrets by subscription id, each list ordered by issue time."""

    by_subscription: Mapping[str, tuple[SigningSecret, ...]]
    path: str | None = None

    def __repr__(self) -> str:
        n = sum(len(v) for v in self.by_subscription.values())
        return f"SecretStore({len(self.by_subscription)} subscriptions, {n} secrets)"

    def __len__(self) -> int:
        return len(self.by_subscription)

    def all_secrets(self) -> list[SigningSecret]:
        """Every secret of every subscription."""
        return [s for v in self.by_subscription.values() for s in v]

    def latest_valid_from(self) -> dict[str, int | None]:
        """Each subscription's newest secret's ``valid_from`` (ns), for secret-age checks."""
        return {k: v[-1].valid_from_ns for k, v in self.by_subscription.items()}

    @classmethod
    def from_values(cls, data: Mapping[str, list[tuple[str, str | None]]]) -> SecretStore:
        """Build a store from ``{sub: [(secret, valid_from_iso_or_None), ...]}`` (tests, demo)."""
        raw = {
            sub: [{"secret": s, **({"valid_from": vf} if vf else {})} for s, vf in items]
            for sub, items in data.items()
        }
        return _parse(raw, where="<values>", environ={})


def read_secrets(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> SecretStore:
    """Read and validate a secrets file.

    Parameters
    ----------
    path
        The JSON secrets file.
    environ
        Where ``secret_env`` names are looked up; defaults to ``os.environ``.

    Raises
    ------
    SecretsError
        One line naming the file and the offending entry (never a value); also for a path that
        is not a regular file (a FIFO, ``/dev/zero``) or a file over 16 MiB.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "secrets.json"
    >>> _ = path.write_text('{"wh_1": [{"secret": "whsec_a"}, {"secret": "whsec_b", '
    ...                     '"valid_from": "2026-10-01T00:00:00Z"}], '
    ...                     '"wh_2": [{"secret": "whsec_c"}]}')
    >>> path.chmod(0o600)
    >>> read_secrets(path)
    SecretStore(2 subscriptions, 3 secrets)
    """
    p = Path(path)
    try:  # a regular file of at most 16 MiB (audit.paths.MAX_SMALL_FILE_BYTES): never a FIFO
        text = read_regular(p, what="secrets file", error=SecretsError).decode("utf-8")
    except FileNotFoundError:
        raise SecretsError(f"{p}: secrets file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SecretsError(f"{p}: cannot read secrets file ({type(e).__name__})") from None
    _check_mode(p)
    raw = load_secrets_json(text, p)
    # Register every declared value before validating, so that a message about a bad entry
    # (a secret pasted as a key, a broken sibling entry) is scrubbed too.
    if isinstance(raw, dict):
        register_sensitive(
            e["secret"]
            for v in raw.values()
            if isinstance(v, list)
            for e in v
            if isinstance(e, dict) and isinstance(e.get("secret"), str)
        )
    store = _parse(raw, where=str(p), environ=os.environ if environ is None else environ)
    register_sensitive(s.key.decode("utf-8", "replace") for s in store.all_secrets())
    return SecretStore(store.by_subscription, path=str(p))


def secret_values(path: str | os.PathLike[str] | None) -> list[str]:
    """The secret values of a secrets file, best effort ([] when it cannot be read), no warning.

    For refusing parameter files that hold a secret (:func:`audit.redaction.refuse_known_secrets`).
    """
    if path is None:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store = read_secrets(path)
    except (SecretsError, OSError, ValueError):
        return []
    return [s.key.decode("utf-8", "replace") for s in store.all_secrets()]


def _parse(raw: object, *, where: str, environ: Mapping[str, str]) -> SecretStore:
    if not isinstance(raw, dict):
        raise SecretsError(f"{where}: expected an object mapping subscription id to a list")
    out: dict[str, tuple[SigningSecret, ...]] = {}
    for sub, items in raw.items():
        if not isinstance(items, list) or not items:
            raise SecretsError(f"{where}: {sub!r} must map to a non-empty list of secrets")
        starts: list[int | None] = []
        keys: list[tuple[bytes, str]] = []
        for i, item in enumerate(items):
            at = f"{where}: {sub!r} entry {i + 1}"
            if not isinstance(item, dict):
                raise SecretsError(f"{at}: expected an object with 'secret' or 'secret_env'")
            unknown = set(item) - {"secret", "secret_env", "valid_from"}
            if unknown:
                raise SecretsError(f"{at}: unknown field(s) {sorted(unknown)}")
            has_value, has_env = "secret" in item, "secret_env" in item
            if has_value == has_env:
                raise SecretsError(f"{at}: give exactly one of 'secret' and 'secret_env'")
            if has_value:
                value = item["secret"]
                if not isinstance(value, str) or not value:
                    raise SecretsError(f"{at}: 'secret' must be a non-empty string")
                keys.append((value.encode("utf-8"), "secret"))
            else:
                name = item["secret_env"]
                if not isinstance(name, str) or not name:
                    raise SecretsError(f"{at}: 'secret_env' must name an environment variable")
                value = environ.get(name)
                if not value:
                    raise SecretsError(f"{at}: environment variable {name} is not set")
                if holds_lone_surrogate(value):  # os.environ holds bytes that are not UTF-8 so
                    raise SecretsError(f"{at}: environment variable {name} is not UTF-8 text")
                keys.append((value.encode("utf-8"), f"env:{name}"))
            vf = item.get("valid_from")
            if vf is None:
                if i > 0:
                    raise SecretsError(f"{at}: 'valid_from' is required after the first secret")
                starts.append(None)
            else:
                try:
                    ns, _ = parse_iso_ns(vf)
                except ValueError:
                    raise SecretsError(f"{at}: 'valid_from' is not an ISO 8601 time") from None
                if starts and starts[-1] is not None and ns <= starts[-1]:
                    raise SecretsError(f"{at}: 'valid_from' must be later than the previous one")
                starts.append(ns)
        secrets = tuple(
            SigningSecret(
                subscription_id=str(sub),
                index=i,
                valid_from_ns=starts[i],
                until_ns=starts[i + 1] if i + 1 < len(starts) else None,
                key=k,
                origin=origin,
            )
            for i, (k, origin) in enumerate(keys)
        )
        out[str(sub)] = secrets
    return SecretStore(out)
