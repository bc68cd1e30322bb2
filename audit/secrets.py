"""The secrets file: each subscription's signing secrets in the order they were issued.

Format (documented in ``docs/formats.md``)::

    {"wh_1": [{"secret": "...", "valid_from": "2026-01-01T00:00:00Z"},
              {"secret_env": "WH1_NEW", "valid_from": "2026-10-15T09:30:00Z"}]}

A secret is current from its ``valid_from`` until the next one's. ``valid_from`` may be absent on
the first secret only (current since forever). Secret values never appear in a repr, a message or
an exception: errors name the subscription, the position and the variable instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from audit.atomic import write_json_atomic
from audit.errors import SecretsError
from audit.timeutil import parse_iso_ns

__all__ = ["SecretStore", "SigningSecret", "add_secret", "read_secrets"]


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


def read_secrets(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> SecretStore:
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
        One line naming the file and the offending entry (never a value).

    Examples
    --------
    >>> store = read_secrets("secrets.json")  # doctest: +SKIP
    >>> store  # doctest: +SKIP
    SecretStore(3 subscriptions, 4 secrets)
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SecretsError(f"{p}: secrets file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SecretsError(f"{p}: cannot read secrets file ({type(e).__name__})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        # The position only: the message of json would quote the text, which holds secrets.
        raise SecretsError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    store = _parse(raw, where=str(p), environ=os.environ if environ is None else environ)
    return SecretStore(store.by_subscription, path=str(p))


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


def add_secret(
    path: str | os.PathLike, subscription_id: str, secret: str, valid_from: datetime
) -> None:
    """Append a newly issued secret to the secrets file, atomically and with mode 0600.

    The file is created when missing. Existing entries (including ``secret_env`` ones) are kept
    as written. The new file is written beside the old one and renamed over it, so a crash
    leaves either the old or the new file, never half of one.
    """
    p = Path(path)
    data: dict = {}
    if p.exists():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise SecretsError(f"{p}: existing secrets file is not valid JSON") from None
        if not isinstance(data, dict):
            raise SecretsError(f"{p}: expected an object mapping subscription id to a list")
    if valid_from.tzinfo is None:
        raise ValueError("valid_from must be timezone-aware")
    entries = data.setdefault(subscription_id, [])
    if not isinstance(entries, list):
        raise SecretsError(f"{p}: {subscription_id!r} must map to a list of secrets")
    stamp = valid_from.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    new_ns = parse_iso_ns(stamp)[0]
    for i, item in enumerate(entries):
        vf = item.get("valid_from") if isinstance(item, dict) else None
        try:
            later = vf is not None and parse_iso_ns(vf)[0] >= new_ns
        except ValueError:
            raise SecretsError(
                f"{p}: {subscription_id!r} entry {i + 1}: bad 'valid_from'"
            ) from None
        if later:
            raise SecretsError(
                f"{p}: {subscription_id!r} already has a secret valid from {vf}, not before "
                f"{stamp}; is the clock behind?"
            )
    entries.append({"secret": secret, "valid_from": stamp})
    p.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(p, data, mode=0o600)
