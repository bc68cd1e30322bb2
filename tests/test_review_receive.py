"""Review of issue 13: the reference receiver warns when it listens beyond loopback."""

from __future__ import annotations

import warnings

import pytest

from audit.cli.receiver import warn_if_exposed


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_non_loopback_bind_warns(host):
    with pytest.warns(UserWarning, match="not loopback, over plain HTTP"):
        warn_if_exposed(host)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "127.0.0.5"])
def test_loopback_bind_is_quiet(host):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_exposed(host)
