"""Every error the toolkit raises on purpose derives from :class:`AuditError`.

The hierarchy::

    AuditError                  base class; ``str(err)`` is one line fit for a terminal
    ├── InputError              a user-supplied file, folder, glob or argument cannot be used
    │   ├── LoadError           a log or snapshot file cannot be read at all (e.g. corrupt .gz)
    │   └── SecretsError        the secrets file is malformed or names an unset variable
    ├── OutputError             an output file cannot be written (full disk, no permission)
    ├── SchemaError             a frame does not have the declared columns or dtypes
    ├── ParameterError          a report or analysis parameter is invalid
    ├── ReportError             the report pipeline failed (notebook, conversion, lock)
    ├── UnreachableError        the probe's target receiver could not be reached at all
    └── ServiceError            the incident service's API answered with an error
        ├── TerminalError       400/401/403/404/413/422: do not retry, fix the request
        │   └── PayloadTooLarge 413, with the server's ``statusCode``/``error``/``message``
        ├── RetryableError      429/5xx or a connection failure, after the retries ran out
        └── LimitError          refused before sending: a published limit would be exceeded

Messages never contain a secret or an API key: they name the file, the line, the variable. A
value the user typed is shown through :func:`audit.redaction.shown`, which cuts known secrets
before shortening.

This module is the bottom of the package: it imports nothing from :mod:`audit`.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "InputError",
    "LimitError",
    "LoadError",
    "OutputError",
    "ParameterError",
    "PayloadTooLarge",
    "ReportError",
    "RetryableError",
    "SchemaError",
    "SecretsError",
    "ServiceError",
    "TerminalError",
    "UnreachableError",
]


class AuditError(Exception):
    """Base class of every deliberate error in :mod:`audit`."""


class InputError(AuditError):
    """A user-supplied path or argument cannot be used."""


class LoadError(InputError):
    """A log or snapshot file cannot be read at all."""


class SecretsError(InputError):
    """The secrets file is malformed, or a ``secret_env`` variable is unset."""


class OutputError(AuditError, OSError):
    """An output file cannot be written; the previous file, if any, is left as it was.

    Also an :class:`OSError`, so callers that handled the underlying failure still do.
    """


class SchemaError(AuditError):
    """A frame lacks declared columns or has the wrong dtypes."""


class ParameterError(AuditError):
    """An analysis or report parameter is invalid."""


class ReportError(AuditError):
    """The report pipeline failed."""


class UnreachableError(AuditError):
    """``audit probe``: no request reached the receiver (connection refused, DNS, TLS)."""


class ServiceError(AuditError):
    """The service's API answered with an error.

    Attributes
    ----------
    status : int or None
        HTTP status, or None for a connection failure.
    server_message : str or None
        The ``message`` the server gave, when it gave one.
    """

    def __init__(
        self, message: str, *, status: int | None = None, server_message: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class TerminalError(ServiceError):
    """A status the spec calls terminal (400, 401, 403, 404, 413, 422): never retried."""


class PayloadTooLarge(TerminalError):
    """413: the request exceeded the service's 10485760-byte limit."""


class RetryableError(ServiceError):
    """429, 5xx or a connection failure that persisted through every retry."""


class LimitError(ServiceError):
    """Refused before sending because a published limit would be exceeded."""
