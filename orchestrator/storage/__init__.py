"""Storage primitives: how bytes reach the disk and come back.

Owns reaching files beneath a work directory without following a link at any component
(``beneath``, which every writer and reader below uses), atomic and durable writes
(temporary file, fsync, rename, directory sync), the instance lock, append-only NDJSON
files that several processes write at once, reading a regular file under the strict JSON
rules, and where a work directory keeps its runs.

May import: ``formats`` and ``orchestrator._errors``. Never the engine, the evidence,
the board, an adapter or the CLI.
"""
