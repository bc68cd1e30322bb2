"""Save a ``GET /webhooks`` listing as a snapshot file (``audit snapshot``), whole and never
over another one, with every secret value the service exposed redacted.

The document is :func:`audit.service.wire.snapshot_document`; the analyses read it with
:func:`audit.analysis.subscriptions.load_snapshots`.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from audit.analysis.subscriptions import unwrap_listing
from audit.errors import OutputError
from audit.redaction import redact_secrets
from audit.service.wire import snapshot_document, snapshot_stem

__all__ = ["write_snapshot"]


#: errno values of file systems that cannot hard-link (FAT, some network mounts).
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


def write_snapshot(
    out_dir: str | os.PathLike,
    body: Any,
    *,
    base_url: str,
    fetched_at: datetime,
    scrub: Iterable[str] = (),
) -> tuple[Path, int, int]:
    """Write a listing snapshot file ``webhooks-<UTC timestamp>.json`` atomically.

    The value of every secret-like key in ``body`` (``secret``, ``signingKey``, ``x-api-key``,
    ``token``...: :func:`audit.redaction.secret_like`) is replaced by ``"[redacted]"``, and so
    is any occurrence of a known value inside strings and keys: the strings in ``scrub`` (the
    API key), the registered secrets, the values found under secret-like keys
    (:func:`audit.redaction.redact_secrets`). A name already
    taken gets a ``-2``, ``-3``... suffix; names are claimed exclusively (a hard link of the
    finished file, which fails when the name exists), so concurrent runs never overwrite
    each other and no reader sees a half-written snapshot.

    Returns
    -------
    (path, subscriptions, redacted)
        The file written, the number of listed subscriptions and of redacted values.

    Examples
    --------
    >>> import tempfile
    >>> from datetime import UTC
    >>> listing = {"data": [{"id": "wh_1", "secret": "whsec_exposed"}], "message": "Success"}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path, listed, redacted = write_snapshot(
    ...         folder,
    ...         listing,
    ...         base_url="https://api.example",
    ...         fetched_at=datetime(2026, 1, 15, 9, 30, tzinfo=UTC),
    ...     )
    ...     print(path.name, listed, redacted)
    ...     print(json.loads(path.read_text())["response"]["data"])
    webhooks-20260115T093000Z.json 1 1
    [{'id': 'wh_1', 'secret': '[redacted]'}]
    """
    redacted, count = redact_secrets(body, also=scrub)
    n = len(unwrap_listing(redacted))
    doc = snapshot_document(redacted, base_url=base_url, fetched_at=fetched_at)
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{folder}: cannot create the folder ({e.strerror})") from None
    stem = snapshot_stem(fetched_at)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise OutputError(f"{folder}: cannot write ({e.strerror})") from None
    staging = Path(tmp)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:  # written whole under a private name
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        for k in range(1, 10_000):
            target = folder / (f"{stem}.json" if k == 1 else f"{stem}-{k}.json")
            try:
                os.link(staging, target)  # exclusive: fails if the name is taken
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno not in _NO_HARD_LINKS:
                    raise
                # A file system without hard links: claim the name exclusively, then rename.
                try:
                    os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                except FileExistsError:
                    continue
                os.replace(staging, target)
            return target, n, count
        raise OutputError(f"{folder}: no free snapshot name for {stem}")
    except OSError as e:
        raise OutputError(
            f"{folder}: cannot write the snapshot ({e.strerror}); nothing was written"
        ) from None
    finally:
        staging.unlink(missing_ok=True)
