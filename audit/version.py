"""The installed package's version, read from its metadata (the wheel's, or the editable
install's), so that modules need not import ``audit.__version__`` from the package top."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["package_version"]


def package_version() -> str:
    """The version of the installed ``audit`` distribution (``"0+unknown"`` when not installed).

    >>> import audit
    >>> package_version() == audit.__version__
    True
    """
    try:
        return version("audit")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "0+unknown"
