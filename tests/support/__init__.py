"""What the tests of every wing share (``tests/support``; pytest puts ``tests/`` on the path,
so a test imports ``from support import sweeps`` or ``from support.pg_support import ...``).

Running things:

- ``cli``: ``orchestrate`` as a host runs it, the one way the tests start it: a new
  process run to its end (``orchestrate``), its command line and environment for a
  process a test steers itself (``command``, ``child_env``), or in this process
  (``in_process``).
- ``process_support``: what the template-create example's fake agent answers.
- ``ui_support``: ``orchestrate ui`` as a person starts it, a real server on loopback.
- ``bad_input_support``: the ``tiny`` instance the bad-input tests pause and answer.
- ``board_crash_support``: the task-board example under ``orchestrate drive``, killed.
- ``pg_fleet``: worker fleets on PostgreSQL and the checks made on what they left.
- ``eval_support``: the hand-made eval run directories and ``eval`` run in-process.

The stores and what a machine may lack:

- ``needs``: a PostgreSQL server, an extra or the browser, else a skip with its reason.
- ``pg_support``: a PostgreSQL schema of the session's own (a pytest plugin: its
  fixtures reach every test through ``conftest.py``).
- ``board_store_support``: one task board on a directory or in PostgreSQL.
- ``sweeps``: how much of a crash sweep a run takes.

Judges and data:

- ``evidence_support``: every evidence line valid and the story whole.
- ``signing_support``: states signed with the session's key.
- ``bridge_documents``: the agent bridge fixtures and the table of bad documents.
- ``powercut``: the power-cut simulator.
- ``long_run_support``: the long run of the crash tests and its answers.

Workflows loaded by file reference: ``crash_counting_workflow``, ``lifecycle_flows``,
``pg_flows``, ``store_flows``, ``ui_flows``.

Scripts run by path as processes of their own: ``board_pg_worker``,
``board_race_process``, ``ndjson_writer_process``, ``echo_agent``; servers on loopback:
``eval_agent_server``, ``http_fake_server``.
"""
