"""pytest plugin (entry point ``pytest11``): the testing helpers as fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from .testing import FakeClock, MockAgentInvoker, SequentialIds, WorkflowHarness


@pytest.fixture
def mock_invoker() -> MockAgentInvoker:
    """A fresh ``MockAgentInvoker`` with no canned answers."""
    return MockAgentInvoker()


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock fixed at 2025-11-18T10:30:00Z that moves only with ``advance`` (a
    ``timedelta`` or a number of seconds)."""
    return FakeClock()


@pytest.fixture
def workflow_harness(tmp_path: Path, fake_clock: FakeClock):  # type: ignore[no-untyped-def]
    """A factory: ``workflow_harness(WorkflowClass, invoker=None)`` -> ``WorkflowHarness``."""

    def make(workflow_cls, *, invoker=None, workdir=None):  # type: ignore[no-untyped-def]
        return WorkflowHarness(
            workflow_cls,
            Path(workdir or tmp_path),
            invoker=invoker,
            clock=fake_clock,
            new_id=SequentialIds(),
        )

    return make
