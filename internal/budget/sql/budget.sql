-- One budget as status shows it.
select name,
       cap,
       rps,
       batch_floor,
       greatest(0, extract(epoch from paused_until - now()) * 1000)::bigint as paused_ms,
       greatest(0, extract(epoch from open_until - now()) * 1000)::bigint   as open_ms,
       coalesce(open_by, '')                                                 as open_by,
       created_at,
       max_spend,
       spent
from hfsent.budget
where name = @name
