"""Connecting to a PostgreSQL store: the DSN, its schema, and errors a person can act on.

A store is named by a libpq URL (``postgresql://host/db``, ``postgresql:///test`` for the
local socket). Its tables live in one schema: the first entry of ``search_path`` when the
URL sets one through ``options`` (``?options=-csearch_path%3Dteam_a``), else
``orchestrator``. Two schemas in one database are two stores that never see each other.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..._errors import OrchestratorError, UsageError

if TYPE_CHECKING:
    import psycopg

DEFAULT_SCHEMA = "orchestrator"
STORE_PREFIXES = ("postgresql://", "postgres://")
_SEARCH_PATH = re.compile(r"-c\s*search_path\s*=\s*([^\s,]+)")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class StoreError(OrchestratorError):
    """The store cannot be used: no driver, no server, a refused login, a database from a
    newer version. ``store`` is the DSN without its password."""

    def __init__(self, message: str, *, store: str) -> None:
        self.store = store
        super().__init__(message)


def is_store_dsn(text: str | None) -> bool:
    """Whether ``text`` names a PostgreSQL store rather than a directory."""
    return bool(text) and str(text).startswith(STORE_PREFIXES)


def shown(dsn: str) -> str:
    """``dsn`` with any password replaced, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", re.sub(r"password=\S+", "password=***", dsn))


def require_psycopg() -> Any:
    """The ``psycopg`` module, or a one-line error naming the extra to install."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "a postgresql:// store needs the driver: pip install "
            "'checkpoint-orchestrator[postgres]'",
            store="",
        ) from None
    return psycopg


def schema_of(dsn: str) -> str:
    """The schema the store at ``dsn`` keeps its tables in."""
    options = _conninfo(dsn).get("options") or ""
    found = _SEARCH_PATH.search(str(options))
    schema = found.group(1).strip("\"'") if found else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"{shown(dsn)}: schema {schema!r} in search_path: use lower-case letters, "
            "digits and underscores"
        )
    return schema


def _conninfo(dsn: str) -> dict[str, Any]:
    """The URL's parts, or a one-line error saying what is wrong with it."""
    driver = require_psycopg()
    try:
        parts: dict[str, Any] = driver.conninfo.conninfo_to_dict(dsn)
    except driver.Error as exc:
        reason = shown(" ".join(str(exc).split()))  # libpq quotes the URL, password too
        raise UsageError(
            f"{shown(dsn)}: not a PostgreSQL URL libpq accepts ({reason}); "
            "write postgresql://USER@HOST:PORT/DATABASE"
        ) from None
    return parts


def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection to the store whose ``search_path`` is the store's schema alone."""
    driver = require_psycopg()
    schema = schema_of(dsn)
    options = str(_conninfo(dsn).get("options") or "")
    if not _SEARCH_PATH.search(options):
        options = f"{options} -c search_path={schema}".strip()
    try:
        conn: psycopg.Connection[Any] = driver.connect(dsn, autocommit=autocommit, options=options)
    except driver.OperationalError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise StoreError(
            f"{shown(dsn)}: cannot connect: {reason}; check that the server runs and the "
            "URL names it (postgresql://USER@HOST:PORT/DATABASE)",
            store=shown(dsn),
        ) from None
    return conn
