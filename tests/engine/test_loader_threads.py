"""Loading a workflow file from several threads at once (a worker's slots do) gives each
the class, never a module still being executed."""

from __future__ import annotations

import threading
from pathlib import Path

from orchestrator.engine.loader import load_workflow

SLOW_FILE = """
import time

from orchestrator import Workflow, phase

time.sleep(0.3)  # a file whose import takes a while: the other thread arrives meanwhile


class Slow(Workflow):
    name = "slow"

    @phase(1)
    def only(self, ctx):
        return "done"
"""


def test_threads_loading_one_file_at_once_each_get_the_class(tmp_path: Path) -> None:
    path = tmp_path / "slow_workflow.py"
    path.write_text(SLOW_FILE)
    reference = f"{path}:Slow"
    found: list[object] = []
    failed: list[BaseException] = []

    def load() -> None:
        try:
            found.append(load_workflow(reference))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not failed, failed
    assert len(found) == 4 and len(set(map(id, found))) == 1
