-- claim claims up to @want rows for this worker (@owner) in a batch with a
-- client column, a client cap or a rate (others: claim_one.sql). It runs
-- after lock_batch.sql, in a snapshot taken once the batch row is locked,
-- so its counts see every result committed before the lock was granted,
-- and this transaction's own. It counts the rows running under an unexpired
-- lease, in all and per client; takes the room the global cap, the rate
-- bucket and @want leave; ranks the first pending, due rows of each client
-- (a LATERAL probe of the pending index per client, so the cost does not
-- grow with the backlog); gives the room first to the clients with the
-- fewest rows running, within the client cap, and among equals to the one
-- served longest ago (so that one-row claims take turns rather than drain
-- the oldest client first); and leases what it picked. Every time is
-- clock_timestamp(), taken after the lock, never now() (the transaction's
-- start). It answers the rows claimed, with their id and text.
with clock as (select clock_timestamp() as now),
settings as (
	-- The batch's limits, whether it is held (a shared pause, or a shared
	-- open breaker for a worker without a fallback), and the tokens its
	-- rate bucket holds now (bursts up to the rate).
	select batch.global_cap, batch.client_cap, batch.global_rps, batch.started_at, batch.client_column,
	       (batch.paused_until > clock.now) or (not @fallback::bool and batch.breaker_open_until > clock.now) as held,
	       case when batch.global_rps is null then null
	            else least(greatest(batch.global_rps, 1), batch.tokens + batch.global_rps * extract(epoch from clock.now - batch.tokens_at)) end as tokens_now
	from hfsent.batch, clock where batch.id = @batch
),
running as (
	-- Rows running under an unexpired lease, per client.
	select i.client, count(*)::int as n
	from hfsent.item i, clock
	where i.batch_id = @batch and i.state = 'running' and i.lease_until > clock.now
	group by i.client
),
room as (
	-- How many rows this claim may take.
	select case when settings.held is true then 0
	            else greatest(0, least(@want::int, settings.global_cap - coalesce((select sum(n) from running), 0)::int,
	                                   coalesce(floor(settings.tokens_now)::int, @want::int))) end as n
	from settings
),
candidates as (
	-- Each client's first pending, due rows, ranked by the rows the client
	-- would then have running. The probe starts at the client's
	-- pending_from (no row below it is pending), so it does not walk the
	-- index entries the rows already claimed leave until VACUUM.
	select due.seq, c.client, c.served_at, c.pending_from,
	       coalesce(running.n, 0) + row_number() over (partition by c.client order by due.seq) as rank
	from hfsent.client c
	left join running on running.client = c.client
	cross join clock
	cross join lateral (
		select i.seq from hfsent.item i
		where i.batch_id = @batch and i.client = c.client and i.state = 'pending' and i.available_at <= clock.now
		  and i.seq >= c.pending_from
		order by i.seq
		limit (select n from room)
		for update skip locked
	) due
	where c.batch_id = @batch and (select n from room) > 0
),
picked as (
	-- The rows this claim takes: within the client cap, the fewest running
	-- first, then the client served longest ago.
	select candidates.seq, candidates.client, candidates.pending_from from candidates, settings
	where settings.client_cap is null or candidates.rank <= settings.client_cap
	order by candidates.rank, candidates.served_at nulls first, candidates.seq
	limit (select n from room)
),
marks as (
	-- Each client's new pending_from: the first row it saw pending and did
	-- not take, or past the last it took.
	select m.client, m.pending_from,
	       coalesce((select i.seq from hfsent.item i
	                 where i.batch_id = @batch and i.client = m.client and i.state = 'pending' and i.seq >= m.pending_from
	                   and i.seq not in (select seq from picked)
	                 order by i.seq limit 1),
	                m.last + 1) as next
	from (select client, min(pending_from) as pending_from, max(seq) as last from picked group by client) m
),
served as (
	-- With a client column: when each client was served, and its mark.
	-- In a batch of one client, the mark only once it moves by 64 rows or
	-- more, to spare a write of the client row per claim.
	update hfsent.client c set
		served_at = case when settings.client_column is not null then clock.now else c.served_at end,
		pending_from = marks.next
	from clock, settings, marks
	where c.batch_id = @batch and c.client = marks.client
	  and (settings.client_column is not null or marks.next >= marks.pending_from + 64)
),
-- Every claim leases its rows the same way (here and in claim_one.sql), so
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
bucket as (
	-- The tokens the claim took from the rate bucket; the batch's first
	-- claim, from which the results' times count.
	update hfsent.batch set
		tokens = case when settings.global_rps is null then batch.tokens else settings.tokens_now - (select count(*) from claimed) end,
		tokens_at = case when settings.global_rps is null then batch.tokens_at else clock.now end,
		started_at = coalesce(batch.started_at, clock.now)
	from settings, clock
	where batch.id = @batch and exists (select 1 from claimed) and (settings.global_rps is not null or settings.started_at is null)
),
-- These batches reserve nothing (see claim_one.sql).
reserved as (select 0::bigint as seq, 0 as attempt where false)
-- shared: claimed_rows (claim, claim_one)
select taken.seq, taken.attempt, taken.reserved, input.request_id, input.text
from (select seq, attempt, false as reserved from claimed
      union all select seq, attempt, true from reserved) taken
join hfsent.input input on input.batch_id = @batch and input.seq = taken.seq
order by taken.seq
-- end shared
