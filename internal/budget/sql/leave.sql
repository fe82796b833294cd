-- A member leaving with no call in flight: its charge is free at once.
delete from hfsent.budget_member
where budget = @budget
  and id = @member
