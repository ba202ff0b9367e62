"""What a test needs that a machine may lack: a PostgreSQL server (``pg_support``), an
optional extra, Debian's chromium.

Where one is missing the test skips, and its reason begins with the kind of need. Under
``CI=true`` such a skip fails the run instead (``conftest``): CI installs every extra and
the browser and always has a server, so a skip there would hide that nothing was tested.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

POSTGRESQL = "PostgreSQL:"
EXTRA = "Extra:"
BROWSER = "Browser:"
KINDS = (POSTGRESQL, EXTRA, BROWSER)

CHROMIUM = Path("/usr/bin/chromium")
chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{BROWSER} needs Debian's chromium (apt-get install chromium)"
)


def extra(module: str, name: str) -> ModuleType:
    """``module``, or a skip naming the extra that brings it."""
    reason = f"{EXTRA} needs the {name} extra (pip install -e '.[{name}]')"
    return pytest.importorskip(module, reason=reason)


def psycopg() -> ModuleType:
    """The PostgreSQL driver, or a skip of the PostgreSQL kind."""
    reason = f"{POSTGRESQL} psycopg is not installed (pip install -e '.[postgres]')"
    return pytest.importorskip("psycopg", reason=reason)


def is_a_need(reason: str) -> bool:
    """Whether a skip's reason is a missing need (pytest may put "Skipped: " before it)."""
    reason = reason.removeprefix("Skipped: ")
    return reason.startswith(KINDS)
