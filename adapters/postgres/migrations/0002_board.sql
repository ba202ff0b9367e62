-- The task board: a board per id (a dispatch board's id is its run's id), its ledger as
-- rows of the same delta documents a ledger.ndjson line holds, and what the board
-- directory keeps besides (packets, results, verdicts, heartbeats, worklogs).
create table boards (
    board_id text primary key,
    -- board.json's bytes
    info bytea not null,
    created_at timestamptz not null default now()
);

-- One row per delta, numbered per board from 1 (its x_seq); appended under the board's
-- writers' lock (a transaction-level advisory lock), so the fold, the judging and the
-- insert are one transaction. A ledger may be written before its board.json.
create table board_ledger (
    board_id text not null,
    seq bigint not null,
    delta_id text not null,
    task_id text not null,
    -- the delta's compact JSON, the exact bytes of its ledger.ndjson line without "\n"
    document bytea not null,
    primary key (board_id, seq),
    unique (board_id, delta_id)
);

-- The fold of a long ledger up to seq, so that loading it folds only its tail.
create table board_snapshots (
    board_id text primary key,
    seq bigint not null,
    delta_id text not null,
    body bytea not null
);

-- packets, results and verdicts: one document per attempt at a task
create table board_documents (
    board_id text not null,
    kind text not null,
    task_id text not null,
    attempt integer not null,
    content bytea not null,
    written_at timestamptz not null default now(),
    primary key (board_id, kind, task_id, attempt)
);

create table board_heartbeats (
    board_id text not null,
    task_id text not null,
    -- the RFC 3339 time the subagent's heartbeat recorded
    beat text not null,
    primary key (board_id, task_id)
);

-- worklog lines, by the task's worklog_path, in the order they were appended
create table board_worklogs (
    board_id text not null,
    path text not null,
    seq bigint generated always as identity,
    -- the ledger delta an orchestrator's entry explains (its x_delta_id)
    delta_id text,
    line bytea not null,
    primary key (board_id, path, seq)
);
