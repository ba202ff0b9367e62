-- Texts stored once (orchestrator.storage.blobs): a prompt, an answer or a step's output
-- over the threshold, one row per distinct text, named by the SHA-256 of the text. The
-- body is the blob as the file store keeps it: a full copy, or a link to an earlier text
-- plus the new tail. A row is never changed; texts are shared between runs, so a row
-- belongs to no run (what no run refers to any more is removed by a prune).
create table text_blobs (
    digest text primary key check (digest ~ '^[0-9a-f]{64}$'),
    body bytea not null,
    created_at timestamptz not null default now()
);

-- Each run's small index of the texts a later one may extend: a hint only, rewritten at
-- will; a lost one costs a full copy, never a wrong text.
create table text_blob_indexes (
    run_id text primary key,
    body bytea not null
);
