"""Public names that load on first use (PEP 562), for packages whose imports are heavy.

``audit`` and ``audit.findings`` list where each public name lives; ``import audit.cli`` then
does not pay for pandas, matplotlib, httpx or papermill until a name is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(
    namespace: dict, where: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package: ``where`` maps a public name to the
    module it is imported from on first use; it is then kept in ``namespace`` (the package's
    ``globals()``) as a plain attribute."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
