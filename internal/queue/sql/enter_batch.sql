-- enter_batch opens every transaction a worker runs on its batch (the
-- heartbeat's; enter_batch_async opens its round trips'): it takes the
-- batch's gate, a transaction-level advisory lock, shared. queue drop takes
-- the gate exclusive before it deletes anything (drop_gate.sql), so a drop
-- waits for the round trips and heartbeats under way, and those that start
-- after it wait for the drop here, at their first statement, holding no
-- lock yet: a worker's transaction, which locks its rows before the batch
-- row, and the drop, which deletes the batch row and every row, never each
-- hold what the other waits for (a deadlock). Workers share the gate: they
-- never wait for each other on it. Past it, the batch row is there, or the
-- batch was dropped.
select pg_advisory_xact_lock_shared(
-- The gate's key.
-- shared: batch_gate (enter_batch, enter_batch_async, drop_gate)
	hashtextextended('hfsent.batch', @batch::bigint)
-- end shared
)
