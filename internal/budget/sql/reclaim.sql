-- Members whose lease passed long enough ago that every call they started
-- under it has ended (the lease, then their attempt timeout, then a
-- grace): their charge is handed back, all but their safe share, which
-- they may go on using with no database for safe_ms past their lease; once
-- that and their timeout and the grace have passed too, their row goes.
-- A member whose session lock was seen free (lost.sql: its process is
-- gone) keeps no safe share: its row goes once its lease, or the moment
-- its lock was seen free if later, and its timeout and the grace have
-- passed.
-- now() is the transaction's start, at or before the lock was taken: a
-- reclaim is never early.
with gone as (
    delete from hfsent.budget_member
    where budget = @budget
      and (lease_until + make_interval(secs => (safe_ms + timeout_ms + @grace_ms) / 1000.0) < now()
           or (lock_lost_at is not null
               and greatest(lease_until, lock_lost_at) + make_interval(secs => (timeout_ms + @grace_ms) / 1000.0) < now()))
    returning id
)
update hfsent.budget_member
set charge = least(charge, safe)
where budget = @budget
  and charge > safe
  and lock_lost_at is null
  and lease_until + make_interval(secs => (timeout_ms + @grace_ms) / 1000.0) < now()
  -- not a row the delete above takes (one statement changes a row once)
  and id not in (select id from gone)
