"""``python -m orchestrator`` is ``orchestrate``."""

from orchestrator.cli import main

raise SystemExit(main())
