-- budget status: every member row, lapsed ones too (their charge still
-- counts until they are reclaimed), in the order they joined.
select id,
       host,
       pid,
       kind,
       max_calls,
       demand,
       in_flight,
       share,
       charge,
       rps,
       lease_until > now()                                  as live,
       safe,
       -- its lease passed, its safe share not: it sends on its safe share
       -- if it runs (a member cut off from the database)
       safe > 0 and lease_until <= now()
           and lease_until + make_interval(secs => safe_ms / 1000.0) > now() as on_safe,
       (extract(epoch from now() - renewed_at) * 1000)::bigint as renewed_ms_ago,
       renewals
from hfsent.budget_member
where budget = @name
order by joined_at, id
