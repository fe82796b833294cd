-- A renewal's second statement, under the budget row's lock: members whose
-- session lock is free (their process exited, kill -9 too, and PostgreSQL
-- ended their session) are marked, at the first renewal of anyone that
-- sees it, so that their safe share is not kept for them (reclaim). Only a
-- member whose last renewal saw its lock held on this server, after the
-- server's incarnation began: a restart or a crash recovery ends every
-- session, and a member that comes back within its safe window keeps its
-- safe share. clock_timestamp(), not now(): the lock was seen free after
-- this transaction began, and the member, whose lock connection ended, has
-- stopped using its safe share by then (it counts its calls from there).
with inc as (
    insert into hfsent.budget_incarnation (id, started)
    values (1, now())
    on conflict (id) do nothing
    returning started
),
since as (
    select greatest(pg_postmaster_start_time(),
                    coalesce((select started from inc),
                             (select started from hfsent.budget_incarnation where id = 1))) as t
),
-- every advisory lock held in this database, read once (pg_locks is
-- volatile: not inlined into the per-row test)
held as (
    select l.classid, l.objid
    from pg_catalog.pg_locks l
    where l.locktype = 'advisory'
      and l.granted
      and l.objsubid = 1
      and l.database = (select oid from pg_catalog.pg_database where datname = current_database())
)
update hfsent.budget_member m
set lock_lost_at = clock_timestamp()
where m.budget = @budget
  and m.locked
  and m.lock_lost_at is null
  and m.renewed_at > (select t from since)
  and not exists (select 1
                  from held h, hfsent.budget_lock_key(m.budget, m.id) k
                  where h.classid = ((k >> 32) & 4294967295)::oid
                    and h.objid = (k & 4294967295)::oid)
