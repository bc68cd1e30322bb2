"""A local stand-in for the incident service's webhook API (``python -m audit.service.fake``)."""

from audit.service.fake.http import (
    TOO_LARGE_MESSAGE,
    FakeService,
    Fault,
    RecordedRequest,
    ServedFake,
)

__all__ = ["TOO_LARGE_MESSAGE", "FakeService", "Fault", "RecordedRequest", "ServedFake"]
