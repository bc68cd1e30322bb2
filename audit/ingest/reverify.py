"""Records verified again in place when the secrets of some subscriptions changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.ingest import records
from audit.ingest.parts import PartWriter
from audit.ingest.secrets import SecretStore
from audit.ingest.store_folder import DATASET, publish

__all__ = ["reverify_parts"]


def reverify_parts(
    root: Path,
    manifest: dict[str, Any],
    subs: set[str],
    secrets: SecretStore,
    tolerance_s: float,
    staging: Path,
    obsolete: list[str],
) -> int:
    """Rewrite every part of the store at ``root`` holding records the changed subscriptions
    ``subs`` could match (records whose subscription was inferred too), verified again with
    ``secrets``; the replaced parts' names go to ``obsolete``. Returns the records rewritten."""
    done = 0
    sub_list = pa.array(sorted(subs), pa.string())
    for entry in manifest["files"]:
        kept = []
        for part in entry["parts"]:
            path = root / DATASET / part
            meta = pq.read_table(path, columns=["subscription_id", "subscription_logged"])
            hit = pc.or_(
                pc.is_in(meta.column("subscription_id"), sub_list),
                pc.equal(pc.fill_null(meta.column("subscription_logged"), True), False),
            )
            if not pc.any(hit).as_py():
                kept.append(part)
                continue
            table = records.reverify(
                pq.read_table(path, schema=records.SCHEMA), secrets, tolerance_s
            )
            done += pc.sum(hit).as_py()  # the others are verified again too, unchanged
            writer = PartWriter(staging, entry["sha256"][:16])
            writer.write(table)
            kept.extend(publish(root, writer.finish()))
            obsolete.append(part)
        entry["parts"] = kept
    return done
