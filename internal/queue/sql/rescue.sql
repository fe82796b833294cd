-- rescue takes back rows whose lease expired under any worker (@seq, as
-- expired.sql listed them, at @attempt): back to pending, due after their
-- backoff (@delay_ms, by the worker's rowBackoff), or, once their attempts
-- are used up, done with their last failure (or upstream_failed when they
-- never got one). It runs after lock_batch.sql (it makes rows pending again:
-- see lower_marks.sql) and answers how many rows went back to pending and
-- how many were done.
with clock as (select clock_timestamp() as now),
lost as (
	-- The rows listed, still running at the attempt listed under a lease
	-- that expired. Rows locked are being written by their worker right
	-- now: passed over, so the rescue, holding the batch row, never waits
	-- for a round trip that waits for it.
	select i.seq, listed.delay_ms from hfsent.item i, clock,
	       unnest(@seq::bigint[], @attempt::int[], @delay_ms::bigint[]) as listed(seq, attempt, delay_ms)
	where i.batch_id = @batch and i.seq = listed.seq and i.attempt = listed.attempt
	  and i.state = 'running' and i.lease_until < clock.now
	for update of i skip locked
),
rescued as (
	update hfsent.item i set
		state = case when i.attempt >= b.max_attempts then 'done' else 'pending' end,
		available_at = clock.now + lost.delay_ms * interval '1 millisecond',
		lease_owner = null,
		lease_until = null
	from clock, hfsent.batch b, lost
	where b.id = @batch and i.batch_id = @batch and i.seq = lost.seq and i.state = 'running' and i.lease_until < clock.now
	returning i.seq, i.client, i.state, i.attempt, i.claimed_at, b.started_at
),
marks_lowered as (
	-- As lower_marks.sql: the clients' pending_from down to the rows back.
	update hfsent.client c set pending_from = lowest.seq
	from (select client, min(seq) as seq from rescued where state = 'pending' group by client) lowest
	where c.batch_id = @batch and c.client = lowest.client and lowest.seq < c.pending_from
),
exhausted as (
	-- A row done with its last failure keeps it; its attempts gain the
	-- claims lost since (this one included), one provider call each.
	insert into hfsent.result as r (batch_id, seq, outcome, error, attempts, claims, queued_ms, started_ms, finished_ms, worker)
	select @batch, rescued.seq, 'upstream_failed',
	       'no result: the worker holding it stopped (crashed or stalled past its lease) on each of ' || rescued.attempt || ' attempts',
	       coalesce(prior.attempts, 0) + greatest(0, rescued.attempt - coalesce(prior.claims, 0)), rescued.attempt,
	       greatest(0, (extract(epoch from rescued.claimed_at - rescued.started_at) * 1000)::bigint), null,
	       greatest(0, (extract(epoch from clock.now - rescued.started_at) * 1000)::bigint), ''
	from rescued cross join clock
	left join hfsent.result prior on prior.batch_id = @batch and prior.seq = rescued.seq
	where rescued.state = 'done'
	on conflict (batch_id, seq) do update set attempts = excluded.attempts, claims = excluded.claims
),
notified as (select pg_notify(@channel, 'rescue') from rescued limit 1)
select count(*) filter (where state = 'pending'), count(*) filter (where state = 'done') from rescued, (select count(*) from notified) n
