"""The secrets file: writing after a rotation, and guarding its invariants."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime

import pytest

from audit.errors import SecretsError
from audit.ingest.secrets import read_secrets
from audit.ingest.secrets_file import add_secret
from audit.timeutil import ns_to_iso, parse_iso_ns


def test_add_secret_appends_atomically_with_mode_0600(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"wh_1": [{"secret_env": "OLD"}]}))
    add_secret(path, "wh_1", "new-value", datetime(2026, 10, 15, 9, 30, tzinfo=UTC))
    data = json.loads(path.read_text())
    assert data["wh_1"] == [
        {"secret_env": "OLD"},
        {"secret": "new-value", "valid_from": "2026-10-15T09:30:00.000000Z"},
    ]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    store = read_secrets(path, environ={"OLD": "old-value"})
    assert [s.label for s in store.by_subscription["wh_1"]] == ["wh_1#1", "wh_1#2"]
    # no temporary file left behind; the lock file stays (removing it would race other writers)
    assert sorted(tmp_path.iterdir()) == [path, path.with_name(path.name + ".lock")]


def test_add_secret_refuses_a_valid_from_that_goes_back(tmp_path):
    path = tmp_path / "s.json"
    add_secret(path, "wh_1", "a", datetime(2026, 10, 15, 9, 30, tzinfo=UTC))
    before = path.read_text()
    with pytest.raises(SecretsError, match="already has a secret valid from"):
        add_secret(path, "wh_1", "b", datetime(2026, 10, 15, 8, 29, tzinfo=UTC))
    assert path.read_text() == before
    read_secrets(path)  # still a valid file


def test_add_secret_refuses_a_malformed_entry(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"wh_1": "x"}')
    with pytest.raises(SecretsError, match="must map to a list"):
        add_secret(path, "wh_1", "b", datetime(2026, 10, 15, tzinfo=UTC))


def test_repr_never_shows_a_secret(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"wh_1": [{"secret": "hunter2-secret"}]}))
    store = read_secrets(path)
    assert "hunter2" not in repr(store) + repr(store.by_subscription["wh_1"][0])


@pytest.mark.parametrize(
    "iso",
    ["2026-10-15T09:30:00.000001Z", "2026-12-31T23:59:59.999999Z", "1999-01-01T00:00:00.000007Z"],
)
def test_ns_to_iso_round_trips_microseconds(iso):
    assert ns_to_iso(parse_iso_ns(iso)[0]) == iso
