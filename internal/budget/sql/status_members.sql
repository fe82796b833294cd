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
       (extract(epoch from now() - renewed_at) * 1000)::bigint as renewed_ms_ago,
       renewals
from hfsent.budget_member
where budget = @name
order by joined_at, id
