"""Agent regression runs: every case of a cases file asked of one version of an agent
(``baseline`` or ``new``), the answers and failures kept as the agent artifact contract
v1 lays them out (``run.json``, ``<caseId>.json``, ``assets/``), then two runs compared.

Owns reading a cases file (``cases``), the transports that reach an agent under test
(``transport``: HTTP ``/run-case``, a subprocess, a callable), the file each answer's
body is written to as it arrives (``bodies``), judging each try into
an error class and retrying it (``attempts``), what moves to ``assets/``
(``payloads``), the files of a run directory (``artifacts``), and the run itself as a
workflow on the engine (``workflow``), so a run survives ``kill -9`` and resumes without
asking a recorded case again.

The comparison side owns reading run directories the tolerant way an evaluator must
(``reading``: unknown event types ignored, later minor versions read, a malformed case
file reported rather than fatal), the verdicts and ``evaluation.json`` (``compare``,
``evaluate``), the self-contained ``report.html`` (``report``), and the check that a run
or evaluation directory meets the contract's definition of done (``check``).

Beside them, recorded workflow runs as a regression suite for workflow code
(``orchestrate replay --corpus``): every run replayed against the current code with its
recorded answers and judged (``replay_corpus``, which writes ``summary.json``), and its
``report.html`` in the same style (``replay_report``).

May import: ``engine``, ``evidence``, ``orchestrator._ports``, ``storage``, ``formats``
and ``orchestrator._errors``. Never an adapter or the CLI: the CLI picks the store.
"""
