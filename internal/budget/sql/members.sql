-- The other members, under the budget row's lock: their charges stand
-- until each renews (and takes this lock to change it).
select id,
       kind,
       max_calls,
       demand,
       charge,
       rps_charge,
       lease_until > now() as live
from hfsent.budget_member
where budget = @budget
  and id <> @member
