"""A listing that names a key twice (issue 44): refused with the reason, from a snapshot file
and from the service's answer. Before, JSON's last-wins kept the second ``data`` and dropped
the first one's subscriptions without a word."""

from __future__ import annotations

import json

import httpx
import pytest

from audit.analysis.subscriptions import load_snapshots
from audit.errors import LoadError, ServiceError
from tests.test_client import Service, client_for

FIRST = '[{"id": "wh_1"}, {"id": "wh_2"}, {"id": "wh_3"}, {"id": "wh_4"}]'
SECOND = '[{"id": "wh_5"}]'


@pytest.mark.parametrize(
    ("response", "key"),
    [
        ('{"data": ' + FIRST + ', "data": ' + SECOND + "}", "data"),  # the top of the listing
        ('{"data": {"items": ' + FIRST + ', "items": ' + SECOND + "}}", "items"),  # inside data
        ('{"data": [{"id": "wh_1", "url": "https://a/", "url": "https://b/"}]}', "url"),  # an item
    ],
)
def test_a_snapshot_naming_a_key_twice_is_refused_with_the_reason(tmp_path, response, key):
    path = tmp_path / "webhooks-20261001T000000Z.json"
    path.write_text(
        '{"fetched_at": "2026-10-01T00:00:00Z", "base_url": "https://api.example", '
        f'"response": {response}}}'
    )
    json.loads(path.read_text())  # valid JSON all the same
    with pytest.raises(LoadError) as e:
        load_snapshots([path])
    assert str(e.value) == (
        f"{path}: not a snapshot: names the key {key!r} twice in one object (JSON readers keep "
        "one and drop the other)"
    )


def test_a_snapshot_naming_fetched_at_twice_is_refused(tmp_path):
    path = tmp_path / "webhooks-20261001T000000Z.json"
    path.write_text(
        '{"fetched_at": "2026-10-01T00:00:00Z", "fetched_at": "2026-11-01T00:00:00Z", '
        '"base_url": "https://api.example", "response": {"data": []}}'
    )
    with pytest.raises(LoadError, match="names the key 'fetched_at' twice"):
        load_snapshots([path])


def test_the_service_s_listing_naming_data_twice_is_a_service_error():
    body = ('{"data": ' + FIRST + ', "data": ' + SECOND + "}").encode()
    c, _ = client_for(Service(httpx.Response(200, content=body)))
    with pytest.raises(ServiceError) as e:
        c.list_webhooks()
    assert "200 OK with a JSON body that names the key 'data' twice in one object" in str(e.value)
    c, _ = client_for(Service(httpx.Response(200, content=body)))
    with pytest.raises(ServiceError, match="names the key 'data' twice"):
        c.fetch_listing()  # what audit snapshot writes: never a listing with 4 entries dropped
