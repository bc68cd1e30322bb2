"""``audit verify`` from raw captures: verdicts on every core, without keeping bodies."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pandas as pd
import pyarrow as pa

from audit.capture import parse_har
from audit.errors import LoadError
from audit.ingest import parallel, records
from audit.ingest.query import frame_from_arrow
from audit.load import expand_paths
from audit.secrets import read_secrets
from audit.signatures import verify_columns
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX, header_names
from audit.verification import VERDICT_COLUMNS

__all__ = ["verify_logs"]


def verify_logs(
    logs: Iterable[str | os.PathLike],
    secrets_path: str | os.PathLike,
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    workers: int | None = None,
    piece_bytes: int | None = None,
) -> pd.DataFrame:
    """One row per input record with the verdict columns (``VERDICT_COLUMNS``), in input order.

    The same rows as ``audit_signatures(...).deliveries[VERDICT_COLUMNS]``, computed by the
    fast path on every core; bodies never leave the worker that read them.

    Examples
    --------
    >>> verify_logs(["captures/"], "secrets.json")["verdict"].value_counts()  # doctest: +SKIP
    """
    files = expand_paths(logs)
    secrets = read_secrets(secrets_path)
    wanted = {v: k for k, v in header_names(header_prefix).items()}
    workers = parallel.cpu_workers() if workers is None else max(1, workers)
    total = sum(f.stat().st_size for f in files)
    size = piece_bytes or parallel.default_piece_bytes(total, workers)
    is_har = [f.name.lower().endswith((".har", ".har.gz")) for f in files]
    jsonl = [f for f, har in zip(files, is_har, strict=True) if not har]
    pieces = (p for f in jsonl for p in parallel.plan_pieces(f, piece_bytes=size))
    results = parallel.map_pieces(
        parallel.verdict_batch,
        pieces,
        sources={str(f): str(f) for f in jsonl},
        wanted=wanted,
        secrets=secrets,
        tolerance_s=tolerance_s,
        workers=workers,
        extra={"names": VERDICT_COLUMNS},
    )
    by_file: dict[str, list[pa.Table]] = {str(f): [] for f in files}
    for table, _, _ in results:  # pieces come back in order, file by file
        if table.num_rows:
            by_file[table.column("source")[0].as_py()].append(table)
    for f, har in zip(files, is_har, strict=True):
        if har:
            by_file[str(f)].append(_har(f, wanted, secrets, tolerance_s))
    tables = [t for f in files for t in by_file[str(f)]]
    if not tables:
        empty = {n: [] for n in VERDICT_COLUMNS}
        return frame_from_arrow(records.stored_columns(empty, VERDICT_COLUMNS))
    return frame_from_arrow(pa.concat_tables(tables))


def _har(path, wanted, secrets, tolerance_s) -> pa.Table:
    try:
        buf = parse_har(records.read_har(path), str(path), wanted)
    except ValueError as e:
        raise LoadError(f"{path}: not a HAR 1.2 file ({e})") from None
    cols = buf.columns()
    v = verify_columns(
        cols["signature"],
        cols["timestamp_header"],
        cols["body"],
        cols["received_at"],
        cols["subscription_id"],
        cols["verdict"],
        cols["detail"],
        secrets,
        tolerance_s=tolerance_s,
    )
    cols.update(vars(v))
    return records.stored_columns(cols, VERDICT_COLUMNS)
