-- A renewal's first statement: the budget row, locked until the renewal
-- commits, so that renewals of one budget take turns and each sees every
-- other member's charge as it stands. The pause and the open breaker are
-- sent as what is left of them (ms), so that clocks need not agree.
select cap,
       rps,
       batch_floor,
       greatest(0, extract(epoch from paused_until - now()) * 1000)::bigint as paused_ms,
       greatest(0, extract(epoch from open_until - now()) * 1000)::bigint   as open_ms,
       coalesce(open_by, '')                                                 as open_by
from hfsent.budget
where name = @budget
for update
