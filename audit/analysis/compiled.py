"""The rules' SQL kept on disk between processes.

Compiling a rule (:mod:`audit.analysis.engine`) to SQL takes Ibis about a second for the
largest (the deliveries and events tables of a store: 4 s in all for one ``audit analyze
--store``), every process again; running it on a small month takes less. So the SQL of each rule
is kept in a file, found again by a key that changes with anything that could change it: the
rule's name, its input schemas and constants, the dialect, the source of every module of the
package (a rule is built of the package's functions and constants), and the versions of Python,
Ibis and SQLGlot.

Where: ``$AUDIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/audit``, else ``~/.cache/audit``, in ``sql/``
(made private, 0700). A file that is not this user's, or that others may write, is never read
(another user could plant SQL there): the rule is compiled again. ``AUDIT_SQL_CACHE=off``: no
file is read or written.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

__all__ = ["SWITCH", "cache_folder", "kept"]

#: The environment variable that turns the files off (``off``).
SWITCH = "AUDIT_SQL_CACHE"


def cache_folder() -> Path:
    """Where the SQL files are kept."""
    root = os.environ.get("AUDIT_CACHE_DIR")
    if root:
        return Path(root) / "sql"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "audit" / "sql"


@functools.cache
def _code_key() -> str:
    """sha256 of the package's source and of the versions the SQL depends on."""
    h = hashlib.sha256()  # the versions as installed: importing Ibis costs a quarter second
    h.update(f"{sys.version}|{version('ibis-framework')}|{version('sqlglot')}".encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def kept(key: str, compile_sql: Callable[[], str]) -> str:
    """The SQL kept under ``key`` (with :func:`_code_key`), or ``compile_sql()``, then kept."""
    if os.environ.get(SWITCH, "").strip().lower() == "off":
        return compile_sql()
    name = hashlib.sha256(f"{_code_key()}|{key}".encode()).hexdigest()
    folder = cache_folder()
    path = folder / f"{name}.sql"
    text = _read_own(path)
    if text is not None:
        return text
    sql = compile_sql()
    _write_private(folder, path, sql)
    return sql


def _read_own(path: Path) -> str | None:
    """``path``'s text if it is a regular file of this user that no one else may write."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with open(fd, encoding="utf-8") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022:
            return None
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return None
        try:
            return f.read()
        except (OSError, UnicodeDecodeError):
            return None


def _write_private(folder: Path, path: Path, sql: str) -> None:
    """Keep ``sql`` at ``path`` (written aside, then renamed: a reader never sees half of it);
    a folder that cannot be written (read-only home, full disk) keeps nothing, silently: the
    next process compiles again."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(sql)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
