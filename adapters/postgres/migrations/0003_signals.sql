-- Signals: data pushed into a run from outside (orchestrate signal), one row each, in the
-- order they came (seq; senders to one run take its row's lock, so seq is commit order).
-- Each has an id, unique in its run: a send repeated with its id keeps it once. The run
-- records in its state the ids it consumed; a signal row is never changed.
create table signals (
    run_id text not null references runs on delete cascade,
    seq bigint generated always as identity,
    signal_id text not null,
    name text not null,
    -- the signal as one JSON line (formats.signals.signal_line)
    line bytea not null,
    primary key (run_id, seq),
    unique (run_id, signal_id)
);
