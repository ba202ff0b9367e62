"""The PostgreSQL store: runs and the task board in a database, for work past one machine.

Installed with the optional extra ``postgres`` (psycopg 3 and psycopg-pool); psycopg is
imported only when a ``postgresql://`` store is named. The modules:

- ``connection``: the DSN, the schema the store lives in, a connection with the driver's
  absence or a refused connection as a one-line error;
- ``migrations``: the versioned SQL files in ``migrations/``, applied under an advisory
  lock at first use or by ``orchestrate db upgrade``.

May import: ``orchestrator._ports``, ``storage``, ``formats`` and the base modules, like
every adapter.
"""
