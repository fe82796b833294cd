-- enter_batch_async is enter_batch for a round trip (Session.Cycle), whose
-- commit need not wait for the disk: a claim lost in a crash of the
-- database leaves its row pending, and the worker that thought it held it
-- has its result refused by the fence, so the row is redone; a result lost
-- in one leaves its row running under a lease the worker no longer renews,
-- or gives back at once (a failed round trip makes the next one
-- reconcile). The setting holds for this transaction only; it rides in the
-- statement that takes the gate, to spare the server a statement per round
-- trip.
select set_config('synchronous_commit', 'off', true),
       pg_advisory_xact_lock_shared(
-- The gate's key.
-- shared: batch_gate (enter_batch, enter_batch_async, drop_gate)
	hashtextextended('hfsent.batch', @batch::bigint)
-- end shared
       )
