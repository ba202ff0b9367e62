"""What the template-create example's fake agent answers, for tests that answer as it does.

(``orchestrate`` itself runs through :mod:`support.cli`.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


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
