-- Fleet budgets (hfsent budget, --budget NAME): one provider budget shared
-- by serve replicas, classify runs and queue workers.
--
-- budget: one row per budget. Every renewal of a member locks it first
-- (SELECT ... FOR UPDATE), so allocations of one budget are serialised and
-- each sees every other member's charge as it stands. It also holds what
-- members share of an outage: a pause after a 429 and an open breaker.
create table hfsent.budget (
    name         text primary key,
    cap          int not null check (cap > 0),
    rps          double precision not null default 0 check (rps >= 0),
    batch_floor  int not null default 1 check (batch_floor >= 0),
    paused_until timestamptz,
    open_until   timestamptz,
    -- open_by: the member that opened the breaker for all: it alone probes.
    open_by      text,
    created_at   timestamptz not null default clock_timestamp(),
    updated_at   timestamptz not null default clock_timestamp()
);

-- budget_member: one row per process in a budget. share is what it was
-- granted at its last renewal; charge is what counts against the cap for
-- it until its next one: max(share, the share it still applied when it
-- asked, its calls in flight then), so that a share that shrinks frees
-- capacity only once the member is within it. A member whose lease passed
-- keeps its charge until lease_until + timeout_ms (its calls must have
-- ended by then), and is deleted at the next renewal of anyone after that.
create table hfsent.budget_member (
    budget      text not null references hfsent.budget (name) on delete cascade,
    id          text not null,
    host        text not null,
    pid         int not null,
    kind        text not null check (kind in ('serve', 'classify', 'worker')),
    max_calls   int not null check (max_calls > 0),
    demand      int not null default 0,
    in_flight   int not null default 0,
    share       int not null default 0,
    charge      int not null default 0,
    rps         double precision not null default 0,
    -- rps_charge is to the budget's rate what charge is to its cap.
    rps_charge  double precision not null default 0,
    timeout_ms  int not null check (timeout_ms > 0),
    lease_until timestamptz not null,
    renewed_at  timestamptz not null default clock_timestamp(),
    joined_at   timestamptz not null default clock_timestamp(),
    renewals    bigint not null default 0,
    primary key (budget, id)
);

---- create above / drop below ----

drop table hfsent.budget_member;
drop table hfsent.budget;
