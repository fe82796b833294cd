-- Tell every member listening at once (the payload names the budget and
-- what to apply), rather than at its next renewal.
select pg_notify('hfsent_budget', @payload)
