-- spend: a member adds what it spent since its last report to the
-- budget's, and reads the fleet's limit and total (its own included).
update hfsent.budget set spent = spent + @delta
where name = @budget
returning max_spend, spent
