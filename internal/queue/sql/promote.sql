-- promote makes running the reservations this worker (@owner) started in
-- the place of rows of its own that finished: each only while the finished
-- row is still running under this worker and its attempt, with its lease
-- unexpired (so it is counted in the room; locked, so a rescue passes over
-- it), and the reservation still this worker's. It runs before the results
-- (complete.sql), which free the finished rows in the same transaction: the
-- swap takes exactly the room a finished row frees, and the count of rows
-- running never changes by it. It answers the reservations it made
-- running.
with swaps as (
	-- Each finished row, with the reservation started in its place.
	select * from unnest(@finished_seq::bigint[], @finished_attempt::int[], @reserved_seq::bigint[], @reserved_attempt::int[])
	  as swaps(finished_seq, finished_attempt, reserved_seq, reserved_attempt)
),
clock as (select clock_timestamp() as now),
finished as (
	-- The finished rows still this worker's, running under their lease.
	select i.seq, i.attempt from hfsent.item i, clock
	where i.batch_id = @batch and i.seq = any(@finished_seq::bigint[]) and i.state = 'running' and i.lease_owner = @owner
	  and i.lease_until > clock.now
	for update of i
)
-- The reservation runs as the attempt the worker started it as, leased
-- like a claim (claim_lease in claim.sql).
update hfsent.item i set state = 'running', attempt = i.attempt + 1,
	lease_until = clock.now + @lease_ms * interval '1 millisecond', claimed_at = clock.now
from swaps, clock, finished
where finished.seq = swaps.finished_seq and finished.attempt = swaps.finished_attempt
  and i.batch_id = @batch and i.seq = any(@reserved_seq::bigint[]) and i.seq = swaps.reserved_seq
-- shared: reserved_by_owner (release, promote, claim_one)
  and i.state <> 'running' and i.lease_owner = @owner
-- end shared
  and i.attempt + 1 = swaps.reserved_attempt
returning i.seq
