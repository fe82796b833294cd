-- batches lists every batch, oldest first, as scanBatch reads them.
select
-- The columns scanBatch reads, in its order.
-- shared: batch_columns (batch, batches)
       id, name, model, global_cap, coalesce(client_column, ''), coalesce(client_cap, 0),
       coalesce(global_rps, 0), lease_ms, max_attempts, max_chars, paused_until, breaker_open_until,
       created_at, started_at, finished_at,
       (select coalesce(sum(p.rows), 0) from hfsent.push p where p.batch_id = batch.id),
       provider, labels
-- end shared
from hfsent.batch
order by id
