"""Agent regression runs: run directories read, compared, reported and checked.

Owns reading the agent artifact contract's run directories (``run.json``, case
artifacts, ``assets/``) the tolerant way an evaluator must (unknown event types ignored,
later minor versions read, a malformed case file reported rather than fatal), the
comparison of a baseline run with a new one into ``evaluation.json`` and its verdicts,
the self-contained ``report.html``, and the check that a run or evaluation directory
meets the contract's definition of done.

May import: ``engine``, ``evidence``, ``orchestrator._ports``, ``storage``, ``formats``
and ``orchestrator._errors``. Never an adapter or the CLI.
"""
