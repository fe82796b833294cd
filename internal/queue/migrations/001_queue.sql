-- The queue's schema. Everything lives in the schema hfsent, so that the
-- queue shares a database with anything else.
--
-- batch: one row per batch. It is also the lock every claim takes first
-- (SELECT ... FOR UPDATE), so claims of one batch are serialised, and it
-- holds what workers share: the caps, the rate bucket, a pause after a 429,
-- an open breaker.
create schema if not exists hfsent;

create table hfsent.batch (
    id                 bigint generated always as identity primary key,
    name               text not null unique,
    model              text not null,
    global_cap         int not null check (global_cap > 0),
    client_column      text,
    client_cap         int check (client_cap > 0),
    global_rps         double precision check (global_rps > 0),
    tokens             double precision not null default 0,
    tokens_at          timestamptz not null default clock_timestamp(),
    lease_ms           int not null check (lease_ms > 0),
    max_attempts       int not null check (max_attempts > 0),
    max_chars          int not null,
    paused_until       timestamptz,
    breaker_open_until timestamptz,
    created_at         timestamptz not null default clock_timestamp(),
    started_at         timestamptz,
    finished_at        timestamptz,
    next_seq           bigint not null default 0
);

-- push: one row per file pushed, so that pushing the same file again is
-- recognised (by its SHA-256) and does nothing.
create table hfsent.push (
    batch_id  bigint not null,
    digest    text not null,
    source    text not null,
    first_seq bigint not null,
    rows      bigint not null,
    pushed_at timestamptz not null default clock_timestamp(),
    primary key (batch_id, digest)
);

-- push_lock: pushes into one batch take turns on this row (never on the
-- batch row, which claims lock).
create table hfsent.push_lock (
    batch_id bigint primary key
);

-- client: the clients of a batch (the values of --client-column), which a
-- claim walks to rank each one's first pending rows; among clients with as
-- many rows running, the one served longest ago goes first.
create table hfsent.client (
    batch_id  bigint not null,
    client    text not null,
    served_at timestamptz,
    primary key (batch_id, client)
);

-- input: what was pushed, never updated.
create table hfsent.input (
    batch_id   bigint not null,
    seq        bigint not null,
    request_id text not null,
    text       text not null,
    primary key (batch_id, seq)
);

-- item: the narrow, hot table that claims, heartbeats and completions
-- update. state: pending (waiting, due at available_at), running (leased
-- to lease_owner until lease_until), done (its result is in result).
-- attempt counts claims; completion is fenced on (state, owner, attempt).
create table hfsent.item (
    batch_id     bigint not null,
    seq          bigint not null,
    client       text not null default '',
    state        text not null check (state in ('pending', 'running', 'done')),
    attempt      int not null default 0,
    available_at timestamptz not null default '-infinity',
    lease_owner  text,
    lease_until  timestamptz,
    claimed_at   timestamptz,
    primary key (batch_id, seq)
) with (fillfactor = 80);

-- A claim ranks the first pending rows of each client in push order.
create index item_pending on hfsent.item (batch_id, client, seq) where state = 'pending';
-- Counting rows running (per client), heartbeats and rescues of expired leases.
create index item_running on hfsent.item (batch_id, lease_until) where state = 'running';

-- result: the last outcome of a row; final once its item is done. Times
-- are milliseconds since the batch's first claim, by the database clock,
-- as classify's are since its start.
create table hfsent.result (
    batch_id    bigint not null,
    seq         bigint not null,
    outcome     text not null,
    label       text not null default '',
    score       double precision not null default 0,
    model       text not null default '',
    attempts    int not null default 0,
    latency_ms  bigint not null default 0,
    error       text not null default '',
    queued_ms   bigint not null default 0,
    started_ms  bigint,
    finished_ms bigint not null default 0,
    finished_at timestamptz not null default clock_timestamp(),
    worker      text not null default '',
    primary key (batch_id, seq)
);

-- worker: the workers seen, for queue status.
create table hfsent.worker (
    batch_id   bigint not null,
    id         text not null,
    host       text not null,
    pid        int not null,
    started_at timestamptz not null default clock_timestamp(),
    seen_at    timestamptz not null default clock_timestamp(),
    primary key (batch_id, id)
);

---- create above / drop below ----

drop schema hfsent cascade;
