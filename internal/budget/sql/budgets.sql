-- budget list: every budget with its members now (live leases only).
select b.name,
       b.cap,
       b.rps,
       b.batch_floor,
       count(m.id) filter (where m.lease_until > now())                    as members,
       coalesce(sum(m.share) filter (where m.lease_until > now()), 0)::int  as shares,
       b.created_at
from hfsent.budget b
left join hfsent.budget_member m on m.budget = b.name
group by b.name
order by b.name
