"""The store's schema, made and upgraded by the versioned SQL files in ``migrations/``.

``NNNN_name.sql`` files apply in number order, each in the transaction that records it in
``schema_migrations``. The whole upgrade holds a transaction-level advisory lock, so two
processes starting at once never migrate together: the second waits, then finds nothing
left to do. A database that a newer version of orchestrate migrated further is refused,
changing nothing.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import attrs

from .connection import StoreError, connect, schema_of, shown

_MIGRATION_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
#: The advisory lock key of migrations: one per database, whatever the schema.
MIGRATION_LOCK = 0x6F72636D  # "orcm"


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str


def shipped() -> list[Migration]:
    """The migrations of this version, in order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def latest() -> int:
    return shipped()[-1].version


def upgrade(dsn: str) -> list[Migration]:
    """Bring the store at ``dsn`` to this version's schema; the migrations applied."""
    with connect(dsn) as conn:
        return upgrade_connection(conn, dsn=dsn)


def upgrade_connection(conn: Any, *, dsn: str) -> list[Migration]:
    """:func:`upgrade` on an open connection (left with no transaction open)."""
    schema = schema_of(dsn)
    applied: list[Migration] = []
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(f'create schema if not exists "{schema}"')
        conn.execute(
            "create table if not exists schema_migrations ("
            " version integer primary key, name text not null,"
            " applied_at timestamptz not null default now())"
        )
        row = conn.execute("select coalesce(max(version), 0) from schema_migrations").fetchone()
        current = int(row[0])
        migrations = shipped()
        newest = migrations[-1].version
        if current > newest:
            raise StoreError(
                f"{shown(dsn)}: the store's schema is at version {current}, newer than this "
                f"orchestrate knows ({newest}); use the orchestrate that upgraded it",
                store=shown(dsn),
            )
        for migration in migrations:
            if migration.version > current:
                conn.execute(migration.sql)
                conn.execute(
                    "insert into schema_migrations (version, name) values (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration)
    return applied


def check_current(conn: Any, *, dsn: str) -> None:
    """Upgrade the store when it is behind (first use included); refuse a newer one."""
    row = conn.execute("select to_regclass('schema_migrations') is not null").fetchone()
    if row[0]:
        version = conn.execute("select coalesce(max(version), 0) from schema_migrations")
        current = int(version.fetchone()[0])
        conn.commit()
        if current == latest():
            return
    else:
        conn.commit()
    upgrade_connection(conn, dsn=dsn)
