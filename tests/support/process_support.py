"""``orchestrate`` as a host runs it: a new process, for the tests of whole commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def orchestrate(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """One ``python -m orchestrator`` process, in this test's environment without the
    ``ORCHESTRATOR_*`` test hooks (crash points, a fixed clock) unless ``env`` gives
    them, signing with the test session's key; whatever it prints, never a traceback."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ORCHESTRATOR_") or k == "ORCHESTRATOR_KEY_FILE"
    }
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", *map(str, args)],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def example_answer(request: dict[str, Any]) -> str:
    """The answer text the template-create example's fake agent gives ``request`` (the
    agent may print a whole response document: its ``response`` then)."""
    import json

    agent = Path(__file__).resolve().parents[2] / "examples" / "template_create" / "fake_agent.py"
    done = subprocess.run(
        [sys.executable, str(agent)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    try:
        document = json.loads(done.stdout)
    except ValueError:
        return done.stdout
    return str(document["response"]) if isinstance(document, dict) else done.stdout
