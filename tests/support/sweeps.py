"""How much of a crash sweep a test run takes.

A sweep kills a process at its crash points (``ORCHESTRATOR_CRASH_AT``, see
``orchestrator.storage.durable.crash_point``) and checks that the run resumes whole. Each
sweep test runs two ways:

- ``each-kind``, in the default run: a kill at the first place of each kind of point (each
  plain label: ``before-rename .x-state.json``, ``after-step-run scan``, ...), plus the
  points the test names itself (a window it must hit);
- ``every-point``, marked ``soak``: a kill at every point, as the sweeps always did. Only
  ``pytest -m soak`` runs these; ``.ci/run`` does, after the README's test command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pytest

EACH_KIND = "each-kind"
EVERY_POINT = "every-point"
SWEEPS = (
    pytest.param(EACH_KIND, id=EACH_KIND),
    pytest.param(EVERY_POINT, id=EVERY_POINT, marks=pytest.mark.soak),
)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def kind(label: str) -> str:
    """A crash point's kind: its label with ids, process ids and other numbers generic."""
    return re.sub(r"\d+", "N", UUID.sub("<id>", label))


def chosen(sweep: str, labels: Sequence[str], *, also: Iterable[int] = ()) -> list[int]:
    """The 1-based points of a run whose crash points are ``labels`` that ``sweep`` kills
    at, in order."""
    if sweep == EVERY_POINT:
        return list(range(1, len(labels) + 1))
    assert sweep == EACH_KIND, sweep
    first: dict[str, int] = {}
    for point, label in enumerate(labels, start=1):
        first.setdefault(kind(label), point)
    return sorted({*first.values(), *also})


def fewer(sweep: str, count: int, each_kind: int) -> int:
    """How many of ``count`` runs of a sweep's other layer (second kills, external kills)
    it makes: all in the soak run, ``each_kind`` otherwise."""
    return count if sweep == EVERY_POINT else min(count, each_kind)
