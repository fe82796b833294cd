-- drop_gate takes the batch's gate exclusive (every worker transaction
-- takes it shared first: enter_batch.sql), so that queue drop waits for
-- the round trips and heartbeats under way and those that come after it
-- find the batch gone.
select pg_advisory_xact_lock(
-- The gate's key.
-- shared: batch_gate (enter_batch, enter_batch_async, drop_gate)
	hashtextextended('hfsent.batch', @batch::bigint)
-- end shared
)
