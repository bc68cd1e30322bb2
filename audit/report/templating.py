"""The Jinja2 environment of the report's HTML: the report's sections, the index, the probe page.

Templates live in ``audit/report/templates/html/`` and ship in the wheel. Autoescape is on for
every template: a value is escaped unless it is marked safe. Attacker-controlled text goes
through the ``text`` filter (escaped, URLs and host names defanged, invisible characters shown
as their code); ``esc`` escapes and shows invisible characters without defanging. ``macros.j2``
holds the shared pieces (``badge``, ``badges``, a table ``cell``, the ``full_lists`` links);
the global ``symbols`` maps each status and severity to its symbol.

>>> render_string("<p>{{ x }} {{ y | text }}</p>", x="<b>", y="see evil.example")
'<p>&lt;b&gt; see evil[.]example</p>'
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup

from audit.report.markup import CSS, SYMBOLS, esc, text

__all__ = ["CSS", "environment", "render", "render_string"]


@cache
def environment() -> jinja2.Environment:
    """The one environment: package templates, autoescape on, undefined names are errors."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("audit.report", "templates/html"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["text"] = lambda value: Markup(text(value))
    env.filters["esc"] = lambda value: Markup(esc(value))
    env.globals["stylesheet"] = Markup(CSS)
    env.globals["symbols"] = SYMBOLS
    return env


def render(name: str, **context: Any) -> str:
    """Render the template ``name`` (in ``templates/html/``) with ``context``."""
    return environment().get_template(name).render(**context)


def render_string(source: str, **context: Any) -> str:
    """Render a template given as text, in the same environment (tests, small pieces)."""
    return environment().from_string(source).render(**context)
