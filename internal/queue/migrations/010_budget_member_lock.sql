-- A fleet budget member's session lock (docs/guides/budget.md, "A member
-- that is gone"): each member holds a session-level advisory lock, keyed by
-- its budget and id, on a connection of its own. A process that exits
-- (kill -9 too) closes that connection and PostgreSQL releases the lock at
-- once; a stopped or cut-off process keeps its connection open, and the
-- lock, until keepalives end it (the member sets them past its safe window).
--
-- locked: its last renewal saw its lock held. lock_lost_at: when a renewal
-- of anyone first saw that lock free while the server that saw it had been
-- up since that renewal (so the session ended on this server, not in a
-- restart): such a member's safe share is not kept for it, its row goes
-- once its calls must have ended.
alter table hfsent.budget_member add column locked boolean not null default false;
alter table hfsent.budget_member add column lock_lost_at timestamptz;

-- The server's incarnation: pg_postmaster_start_time() marks a restart, but
-- not a crash recovery (every session ends, the postmaster stays); an
-- unlogged table is emptied by crash recovery, so its one row, written
-- again by the first renewal after one, marks it.
create unlogged table hfsent.budget_incarnation (
    id      int primary key default 1 check (id = 1),
    started timestamptz not null
);

-- The member's lock key: the member takes it, renewals look it up.
create function hfsent.budget_lock_key(budget text, id text) returns bigint
    language sql immutable parallel safe
    as $$ select hashtextextended(budget || '/' || id, 31) $$;

-- Whether a session holds that lock now, in this database.
create function hfsent.budget_lock_held(k bigint) returns boolean
    language sql stable
    as $$ select exists (select 1
                   from pg_catalog.pg_locks l
                   where l.locktype = 'advisory'
                     and l.granted
                     and l.objsubid = 1
                     and l.database = (select oid from pg_catalog.pg_database where datname = current_database())
                     and l.classid = ((k >> 32) & 4294967295)::oid
                     and l.objid = (k & 4294967295)::oid) $$;

---- create above / drop below ----

drop function hfsent.budget_lock_held(bigint);
drop function hfsent.budget_lock_key(text, text);
drop table hfsent.budget_incarnation;
alter table hfsent.budget_member drop column lock_lost_at;
alter table hfsent.budget_member drop column locked;
