"""``python -m orchestrator`` is ``orchestrate``."""

from orchestrator.cli import entry

entry()
