"""The fake's command line: ``python -m audit.service.fake`` serves one until interrupted."""

from __future__ import annotations

import argparse
import os
import sys
import threading

from audit.service.fake.http import FakeService
from audit.service.fake.state import LISTING_SHAPES

__all__ = ["main"]

_DESCRIPTION = (
    "A local stand-in for the incident service's webhook API, for tests and credential-free trials."
)


def main(argv: list[str] | None = None) -> int:
    """``python -m audit.service.fake``: serve a fake on 127.0.0.1 until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m audit.service.fake", description=_DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--api-key-env",
        default="AUDIT_API_KEY",
        metavar="NAME",
        help="variable holding the API key the fake accepts (default: AUDIT_API_KEY)",
    )
    parser.add_argument("--client-id", default="client_1")
    parser.add_argument("--listing-shape", choices=LISTING_SHAPES, default="data")
    parser.add_argument(
        "--expose-secrets-in-listing",
        action="store_true",
        help="misbehave: show each subscription's current secret in GET /webhooks",
    )
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env)
    if not key:
        print(f"fake_service: error: set {args.api_key_env} to the key to accept", file=sys.stderr)
        return 3
    fake = FakeService(
        api_keys={key: args.client_id},
        listing_shape=args.listing_shape,
        expose_secrets_in_listing=args.expose_secrets_in_listing,
    )
    try:
        served = fake.serve(args.host, args.port)
    except OSError as e:
        print(
            f"fake_service: error: cannot listen on {args.host}:{args.port}: {e.strerror}",
            file=sys.stderr,
        )
        return 3
    print(f"fake service listening on {served.base_url} (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        served.close()
    return 0
