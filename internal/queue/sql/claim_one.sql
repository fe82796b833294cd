-- claim_one is claim.sql for a batch of one client with no client cap and
-- no rate: the same counts, times and locks (after lock_batch.sql, its
-- snapshot taken once the batch row is locked; clock_timestamp(), never
-- now()), but no ranking of clients, so a smaller plan, which costs less to
-- start on every round trip and holds the batch row for less time (about a
-- sixth less server CPU per row in bench/queue_vs_classify.sh). The probe
-- stays LATERAL: joined plainly, the generic plan scanned every pending row
-- and sorted them.
--
-- These batches also reserve (at most @reserve rows, see Session.Reserves):
-- the rows the probe finds past those it claims are leased to the worker
-- but stay pending, so they count against no cap; while the batch is held
-- (paused, breaker open) nothing is claimed or reserved. The room goes
-- first to the worker's own reservations (@promote), so a worker never
-- waits on rows it holds. Other workers' reservations are passed over until
-- their lease ends. pending_from never passes a reserved row (the mark is
-- the first pending row not claimed), so a reservation given back or
-- expired is found again without lowering it. It answers the rows claimed
-- and reserved, with their id and text.
with clock as (select clock_timestamp() as now),
batch_now as (
	-- Whether the batch is held (a shared pause, or a shared open breaker
	-- for a worker without a fallback), and its places free under the cap.
	select batch.started_at,
	       (batch.paused_until > clock.now) or (not @fallback::bool and batch.breaker_open_until > clock.now) as held,
	       batch.global_cap - (select count(*) from hfsent.item i
	                           where i.batch_id = @batch and i.state = 'running' and i.lease_until > clock.now)::int as free
	from hfsent.batch, clock where batch.id = @batch
),
room as (
	-- How many rows this claim takes, and reserves beside them.
	select started_at,
	       case when held then 0 else greatest(0, least(@want::int, free)) end as claim,
	       case when held then 0 else greatest(0, @reserve::int) end as reserve
	from batch_now
),
clients as (select client.client, client.pending_from from hfsent.client where client.batch_id = @batch),
own as (
	-- The worker's own reservations it asks to run first.
	select i.seq from hfsent.item i
	where i.batch_id = @batch and i.seq = any(@promote::bigint[])
-- shared: reserved_by_owner (release, promote, claim_one)
  and i.state <> 'running' and i.lease_owner = @owner
-- end shared
	order by i.seq
	limit (select claim from room)
	for update skip locked
),
probe as (
	-- The first pending, due rows not reserved by another worker (or whose
	-- reservation expired), numbered after the worker's own: the first
	-- ones are claimed, the next reserved. The probe starts at
	-- pending_from (no row below it is pending).
	select due.seq, row_number() over (order by due.seq) + (select count(*) from own) as n
	from clients cross join clock cross join lateral (
		select i.seq from hfsent.item i
		where i.batch_id = @batch and i.client = clients.client and i.state = 'pending' and i.available_at <= clock.now
		  and i.seq >= clients.pending_from
		  and (i.lease_owner is null or (i.lease_until <= clock.now and i.lease_owner <> @owner))
		order by i.seq
		limit (select claim + reserve from room)
		for update skip locked
	) due
),
picked as (
	select seq from own
	union all
	select seq from probe where n <= (select claim from room)
),
to_reserve as (select seq from probe where n > (select claim from room) and n <= (select claim + reserve from room)),
marks as (
	-- The client's new pending_from: the first row pending and not taken
	-- (a reserved row stays pending: the mark never passes it), or past the
	-- last taken.
	select clients.client, clients.pending_from,
	       coalesce((select i.seq from hfsent.item i
	                 where i.batch_id = @batch and i.client = clients.client and i.state = 'pending' and i.seq >= clients.pending_from
	                   and i.seq not in (select seq from picked)
	                 order by i.seq limit 1),
	                (select max(seq) + 1 from picked)) as next
	from clients where exists (select 1 from picked)
),
served as (
	-- Only once the mark moves by 64 rows or more, to spare a write of the
	-- client row per claim.
	update hfsent.client set pending_from = marks.next
	from marks
	where client.batch_id = @batch and client.client = marks.client and marks.next >= marks.pending_from + 64
),
-- Every claim leases its rows the same way (here and in claim.sql), so
-- that the fence (state, owner, attempt) sees one kind of claimed row.
-- shared: claim_lease (claim, claim_one)
claimed as (
	update hfsent.item i set state = 'running', attempt = i.attempt + 1, lease_owner = @owner,
		lease_until = clock.now + @lease_ms * interval '1 millisecond', claimed_at = clock.now
	from picked, clock
	where i.batch_id = @batch and i.seq = picked.seq
	returning i.seq, i.attempt
),
-- end shared
reserved as (
	-- Leased, still pending; the attempt it will run as.
	update hfsent.item i set lease_owner = @owner, lease_until = clock.now + @lease_ms * interval '1 millisecond'
	from to_reserve, clock
	where i.batch_id = @batch and i.seq = to_reserve.seq
	returning i.seq, i.attempt + 1 as attempt
),
started as (
	-- The batch's first claim, from which the results' times count.
	update hfsent.batch set started_at = clock.now
	from room, clock
	where batch.id = @batch and room.started_at is null and exists (select 1 from claimed)
)
-- shared: claimed_rows (claim, claim_one)
select taken.seq, taken.attempt, taken.reserved, input.request_id, input.text
from (select seq, attempt, false as reserved from claimed
      union all select seq, attempt, true from reserved) taken
join hfsent.input input on input.batch_id = @batch and input.seq = taken.seq
order by taken.seq
-- end shared
