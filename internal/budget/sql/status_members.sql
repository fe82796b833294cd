-- budget status: every member row, lapsed ones too (their charge still
-- counts until they are reclaimed), in the order they joined. A lapsed
-- member's share is listed as what it holds now, its charge: its old share
-- no longer counts (once its calls must have ended, the budget keeps only
-- its safe share for it), so the shares listed sum to at most the cap.
select id,
       host,
       pid,
       kind,
       max_calls,
       demand,
       in_flight,
       case when lease_until > now() then share else charge end as share,
       charge,
       rps,
       lease_until > now()                                  as live,
       safe,
       -- its lease passed, its safe share not: it sends on its safe share
       -- if it runs (a member cut off from the database)
       -- (not one whose session lock was seen free: its process is gone)
       safe > 0 and lease_until <= now() and lock_lost_at is null
           and lease_until + make_interval(secs => safe_ms / 1000.0) > now() as on_safe,
       (extract(epoch from now() - renewed_at) * 1000)::bigint as renewed_ms_ago,
       renewals
from hfsent.budget_member
where budget = @name
order by joined_at, id
