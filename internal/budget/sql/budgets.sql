-- budget list: every budget with its members now (live leases only) and
-- the sum of the shares status lists: a live member's share, a lapsed
-- one's charge (what it holds until it is reclaimed).
select b.name,
       b.cap,
       b.rps,
       b.batch_floor,
       count(m.id) filter (where m.lease_until > now())                    as members,
       coalesce(sum(case when m.lease_until > now() then m.share else m.charge end), 0)::int as shares,
       b.created_at
from hfsent.budget b
left join hfsent.budget_member m on m.budget = b.name
group by b.name
order by b.name
