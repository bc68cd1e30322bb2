"""Records verified again in place when the secrets of some subscriptions changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.ingest import records
from audit.ingest.parts import PartWriter
from audit.ingest.secrets import SecretStore
from audit.ingest.store_folder import DATASET, part_problem, publish
from audit.progress import Progress, counting

__all__ = ["Reverified", "reverify_parts"]


@dataclass
class Reverified:
    """What :func:`reverify_parts` did."""

    #: Records of the changed subscriptions (or inferred ones) verified again.
    records: int = 0
    #: The parts replaced (dataset-relative names).
    replaced: list[str] = field(default_factory=list)
    #: One line per damaged part left as it was.
    messages: list[str] = field(default_factory=list)


def reverify_parts(
    root: Path,
    manifest: dict[str, Any],
    subs: set[str],
    secrets: SecretStore,
    tolerance_s: float,
    staging: Path,
    obsolete: list[str],
    progress: Progress | None = None,
) -> Reverified:
    """Rewrite every part of the store at ``root`` holding records the changed subscriptions
    ``subs`` could match (records whose subscription was inferred too), verified again with
    ``secrets``; the replaced parts' names go to ``obsolete``.

    A damaged or missing part is left as it is and said (its readers stop at it, naming it):
    the ingest repairs it when its capture file is given, reading it again with the new
    secrets. ``progress`` counts the records verified again, part by part."""
    done = Reverified()
    tally = counting(progress)
    sub_list = pa.array(sorted(subs), pa.string())
    for entry in manifest["files"]:
        kept = []
        for part in entry["parts"]:
            name = part["name"]
            why = part_problem(root, part)
            if why is not None:
                done.messages.append(
                    f"{root / DATASET / name}: damaged ({why}); not verified again: give its "
                    f"capture file ({entry['path']}) to audit ingest to repair it"
                )
                kept.append(part)
                continue
            path = root / DATASET / name
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
            done.records += pc.sum(hit).as_py()  # the others are verified again too, unchanged
            tally.add_records(table.num_rows)
            writer = PartWriter(staging, entry["sha256"][:16])
            writer.write(table)
            kept.extend(publish(root, writer.finish()))
            obsolete.append(name)
            done.replaced.append(name)
        entry["parts"] = kept
    return done
