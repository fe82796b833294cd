-- budget set: create the budget, or change what was given (a NULL keeps
-- the value it has). xmax = 0 on the row returned: it was inserted. The
-- row returned is the one this statement wrote (its row lock held), so
-- set prints its own values, never a racing writer's.
insert into hfsent.budget as b (name, cap, rps, batch_floor, max_spend)
values (@name, @cap, coalesce(@rps::double precision, 0), coalesce(@floor::int, 1), coalesce(@max_spend::double precision, 0))
on conflict (name) do update
set cap         = excluded.cap,
    rps         = coalesce(@rps::double precision, b.rps),
    batch_floor = coalesce(@floor::int, b.batch_floor),
    max_spend   = coalesce(@max_spend::double precision, b.max_spend),
    updated_at  = clock_timestamp()
returning (xmax = 0) as created, cap, rps, batch_floor, max_spend
