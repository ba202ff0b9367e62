"""``python -m orchestrator`` is ``orchestrate``."""

from orchestrator.cli.main import entry

entry()
