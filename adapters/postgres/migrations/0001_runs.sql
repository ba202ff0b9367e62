-- Runs: one row per run, its state as the state file's exact bytes, its mailbox and its
-- evidence. A checkpoint writes the row, the published requests and the evidence in one
-- transaction.
create table runs (
    run_id text primary key,
    workflow_name text not null,
    workflow_ref text not null,
    -- queued (no state yet: a worker starts it), running, paused, failed, completed,
    -- cancelled
    status text not null,
    -- the state file's bytes while the run lives; null once it ended
    state bytea,
    -- +1 at every save: what the bridge's state token is
    state_version bigint not null default 0,
    -- the final state, finished requests whole again, once the run ended
    history bytea,
    -- what a queued run starts with: inputs, output path, work directory
    start_args jsonb,
    -- +1 at every response received; handled: the inbox count the last pause had read
    inbox bigint not null default 0,
    handled bigint not null default 0,
    -- a durable timer of the current phase
    wake_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
create index runs_live on runs (updated_at) where status in ('queued', 'running', 'paused');

create table requests (
    run_id text not null references runs on delete cascade,
    request_id text not null,
    position integer not null,
    document bytea not null,
    primary key (run_id, request_id)
);

create table responses (
    run_id text not null references runs on delete cascade,
    request_id text not null,
    document bytea not null,
    sha256 text not null,
    received_at timestamptz not null default now(),
    primary key (run_id, request_id)
);

-- finished requests of completed phases, kept whole before the state drops their text
create table archive (
    run_id text not null references runs on delete cascade,
    seq bigint generated always as identity,
    line bytea not null,
    primary key (run_id, seq)
);

-- the run's events.ndjson, a row per line, in x_seq order
create table events (
    run_id text not null references runs on delete cascade,
    seq bigint not null,
    line bytea not null,
    primary key (run_id, seq)
);

-- the run's other evidence files (results.json, prompts, ...), by path in its directory
create table run_files (
    run_id text not null references runs on delete cascade,
    path text not null,
    content bytea not null,
    primary key (run_id, path)
);
