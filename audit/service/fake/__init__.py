"""A local stand-in for the incident service's webhook API (``python -m audit.service.fake``).

- :mod:`~audit.service.fake.state`: subscriptions, secrets, attachments, scripted faults.
- :mod:`~audit.service.fake.http`: :class:`FakeService`, which answers API requests from that
  state, in-process (an httpx transport) or on a socket.
- :mod:`~audit.service.fake.server`: the socket server (:class:`ServedFake`).
- :mod:`~audit.service.fake.cli`: the command line (:func:`main`).
"""

from audit.service.fake.cli import main
from audit.service.fake.http import TOO_LARGE_MESSAGE, FakeService
from audit.service.fake.server import ServedFake
from audit.service.fake.state import Fault, RecordedRequest

__all__ = ["TOO_LARGE_MESSAGE", "FakeService", "Fault", "RecordedRequest", "ServedFake", "main"]
