"""`audit verify LOG --store S` outputs every record LOG holds now (issue 35).

A log rewritten without some lines and with new ones keeps, in the store, its earlier
content's records under the earlier entry; the new entry holds only the new records. Reading
the new entry's parts alone gave the new records only. The expected rows are those of
`audit verify LOG` without the store (the raw captures read again).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from audit.cli import main
from audit.ingest.verification import VERDICT_COLUMNS
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_rewritten_log_secret"


def _record(n: int, *, forged: bool = False) -> dict:
    received = datetime(2026, 10, 3, 9, 0, n, tzinfo=UTC)
    ts = str(int(received.timestamp()))
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    key = b"whsec_forger" if forged else SECRET.encode()
    mac = hmac.new(key, f"{ts}.{body}".encode(), hashlib.sha256).hexdigest()
    return capture(body, received_at=received.isoformat(), signature=f"sha256={mac}", timestamp=ts)


def _sorted(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path)[VERDICT_COLUMNS]
    df["received_at"] = df["received_at"].astype("datetime64[us, UTC]")
    return df.sort_values(["source", "line"]).reset_index(drop=True)


@pytest.mark.slow
@pytest.mark.parametrize("second", ["ingest", "verify"])
def test_verify_from_the_store_gives_every_record_of_a_rewritten_log(tmp_path, second):
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    log, store = tmp_path / "recv.jsonl", tmp_path / "store"
    first = [_record(n) for n in range(6)] + [_record(6, forged=True), _record(7, forged=True)]
    write_jsonl(log, first)
    common = ["--secrets", str(secrets)]
    assert main(["ingest", str(log), *common, "--store", str(store)]) == 0
    # Rewritten: lines 2 and 7 (one valid, one forged) dropped, two new records added.
    write_jsonl(log, [first[0], *first[2:6], first[7], _record(8), _record(9, forged=True)])
    if second == "ingest":  # rewritten, ingested again, then verified from the store
        assert main(["ingest", str(log), *common, "--store", str(store)]) == 0
    from_store, raw = tmp_path / "s.parquet", tmp_path / "r.parquet"
    assert main(["verify", str(log), *common, "--store", str(store), "--out", str(from_store)]) == 0
    manifest = json.loads((store / "manifest.json").read_text())
    (now,) = [e for e in manifest["files"] if e["path"] == str(log.resolve())]
    assert (now["records"], now["held"]) == (2, 6)  # 2 new records; 6 stored before
    assert main(["verify", str(log), *common, "--out", str(raw)]) == 0
    got, want = _sorted(from_store), _sorted(raw)
    assert len(want) == 8 and want["line"].tolist() == list(range(1, 9))
    assert want["verdict"].value_counts().to_dict() == {"valid": 6, "signature_mismatch": 2}
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    # The store still holds every record of both versions: 8 + 2 new ones.
    assert main(["verify", "--store", str(store), "--out", str(tmp_path / "all.parquet")]) == 0
    assert len(pd.read_parquet(tmp_path / "all.parquet")) == 10


def test_a_file_whose_records_are_all_its_own_reads_its_parts(tmp_path):
    """No record held elsewhere: no `held`, the entry's parts as before."""
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    log, store = write_jsonl(tmp_path / "a.jsonl", [_record(n) for n in range(3)]), tmp_path / "s"
    out = tmp_path / "v.parquet"
    args = [str(log), "--secrets", str(secrets), "--store", str(store), "--out", str(out)]
    assert main(["verify", *args]) == 0
    assert "held" not in json.loads((store / "manifest.json").read_text())["files"][0]
    assert pd.read_parquet(out)["line"].tolist() == [1, 2, 3]
