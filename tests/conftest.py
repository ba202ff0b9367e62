"""Shared test settings.

Hypothesis runs derandomized and without per-example deadlines: CI machines have two
cores shared with subprocess-heavy tests, and a timing-dependent failure is not a finding.

The key that signs states is a temporary file of this test session, never the user's: it
is named by ``ORCHESTRATOR_KEY_FILE``, and ``XDG_CONFIG_HOME`` leads to the same file, so
a process started with the ``ORCHESTRATOR_*`` variables stripped signs with it too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

pytest_plugins = ["support.pg_support"]

_CONFIG_HOME = Path(tempfile.mkdtemp(prefix="orchestrator-test-config-"))
os.environ["XDG_CONFIG_HOME"] = str(_CONFIG_HOME)
os.environ["ORCHESTRATOR_KEY_FILE"] = str(_CONFIG_HOME / "checkpoint-orchestrator" / "state.key")


def pytest_unconfigure() -> None:
    shutil.rmtree(_CONFIG_HOME, ignore_errors=True)


settings.register_profile("project", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("project")


# Modules whose module-scoped fixtures are costly (a baseline run, a whole crash sweep):
# pytest-xdist sends each one whole to one worker, so no fixture is made twice.
ONE_WORKER = (
    "tests/board/test_board_concurrency.py",
    "tests/board/test_board_crash_safety.py",
    "tests/engine/test_crash_safety.py",
    "tests/engine/test_long_run_crashes.py",
    "tests/storage/test_power_cut.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Load scheduling, one test at a time, but a module of ``ONE_WORKER`` as one unit.
    (pytest-xdist's own ``loadgroup`` renames node ids, which pytest 9.2 no longer lets it.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak tests (crash sweeps at every point, where the default run takes one point
    of each kind; the largest races and ledgers; installs from the package index) run only
    when a marker expression names them: ``pytest -m soak``."""
    if "soak" in (config.option.markexpr or ""):
        return
    soaked = [item for item in items if item.get_closest_marker("soak")]
    if soaked:
        config.hook.pytest_deselected(items=soaked)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


def _fail_a_missing_need(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ``CI=true`` a skip for a missing need (``needs``) fails: CI has them all."""
    if not report.skipped or os.environ.get("CI") != "true":
        return
    from support.needs import is_a_need

    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
    if is_a_need(str(reason)):
        report.outcome = "failed"
        report.longrepr = f"a test may not skip for a missing need under CI=true: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    _fail_a_missing_need(outcome.get_result())  # type: ignore[attr-defined]
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    _fail_a_missing_need(outcome.get_result())  # type: ignore[attr-defined]
    return None
