"""Storage primitives: how bytes reach the disk and come back.

- ``beneath``: files beneath a work directory, reached without following a link at any
  component (every writer and reader below uses it);
- ``durable``: atomic and durable writes (temporary file, fsync, rename, directory
  sync), several files as one group commit, the instance lock, the SHA-256 every
  digest is made with;
- ``ndjson``: append-only NDJSON files that several processes write at once;
- ``files``: reading a regular file under the strict JSON rules;
- ``runs``: where a work directory keeps its runs;
- ``signing_key``: the user's signing key, outside any work directory;
- ``state_key``: the signature over a state's file, made and checked with that key;
- ``checkpoints``: the last checkpoint that key signed for each run, beside the key, and
  the work directory a run belongs to (a state rolled back or copied is refused);
- ``kept_texts``: what a save keeps for the next one (items' texts, segments' hashes),
  so that it encodes and hashes only what changed; and ``ReadMemo``, what one run's
  handling learnt of the state's bytes (checked, parsed), owned and passed by its caller;
- ``blobs``: texts stored once by SHA-256 (a growing text as a link plus its tail),
  checked against their digest when read, under ``.orchestrator/blobs/`` or a backend's.

May import: ``formats`` and ``orchestrator._errors``. Never the engine, the evidence,
the board, an adapter or the CLI.
"""
