-- complete writes a worker's results, fenced: a row is written only while
-- it is still running under this worker (@owner) and this attempt;
-- otherwise its result is discarded (its lease passed to another worker).
-- A result done is final; a retry records the failure as the row's last
-- and puts the row back to pending, due after its delay (the worker's
-- rowBackoff, or the provider's Retry-After); a give-back undoes the claim
-- (a row never sent is not charged the attempt). It runs before the batch
-- row is locked (lock_batch.sql): it holds only its own rows, and a row
-- written frees its place for the claim that follows in the same
-- transaction. It answers the rows written.
with done as (
	-- The results, one array per column: one a row, by construction (a
	-- worker reports only the newest attempt of a row it claimed again:
	-- two would have the upsert below affect the row twice, which
	-- PostgreSQL refuses for the whole statement, SQLSTATE 21000).
	select * from unnest(@seq::bigint[], @attempt::int[], @action::text[], @outcome::text[], @label::text[], @score::float8[],
	                     @model::text[], @attempts::int[], @latency_ms::bigint[], @error::text[], @wait_ms::bigint[],
	                     @total_ms::bigint[], @delay_ms::bigint[], @prompt_tokens::int[], @completion_tokens::int[],
	                     @cost_usd::float8[], @cached::bool[], @raw_score::float8[], @review::bool[], @stage::smallint[],
	                     @cached_prompt_tokens::int[], @scores::text[])
	  as done(seq, attempt, action, outcome, label, score, model, attempts, latency_ms, error, wait_ms, total_ms, delay_ms,
	          prompt_tokens, completion_tokens, cost_usd, cached, raw_score, review, stage, cached_prompt_tokens, scores)
),
written as (
	-- The fence: state, owner, attempt.
	update hfsent.item i set
		state = case done.action when 'done' then 'done' else 'pending' end,
		attempt = case when done.action = 'giveback' and done.attempts = 0 then i.attempt - 1 else i.attempt end,
		available_at = clock_timestamp() + done.delay_ms * interval '1 millisecond',
		lease_owner = null,
		lease_until = null
	from done
	where i.batch_id = @batch and i.seq = done.seq and i.state = 'running' and i.lease_owner = @owner and i.attempt = done.attempt
	returning i.seq, i.claimed_at
),
queued as (
	-- When each row written was claimed, in milliseconds since the batch's
	-- first claim: the times of the results count from there.
	select written.seq, greatest(0, (extract(epoch from written.claimed_at - b.started_at) * 1000)::bigint) as ms
	from written, hfsent.batch b where b.id = @batch
),
saved as (
	insert into hfsent.result as r (batch_id, seq, outcome, label, score, model, attempts, claims, latency_ms, error,
	                                queued_ms, started_ms, finished_ms, finished_at, worker, prompt_tokens, completion_tokens,
	                                cost_usd, cached, raw_score, review, stage, cached_prompt_tokens, scores)
	select @batch, done.seq, done.outcome, done.label, done.score, done.model,
	       -- The provider calls of every claim of the row: those of the
	       -- results before (prior), one for each claim since that wrote
	       -- none (its worker stopped after it had sent the row, as a
	       -- worker sends a row once it claims it: the least it made, see
	       -- result.claims), and this claim's.
	       coalesce(prior.attempts, 0) + greatest(0, done.attempt - 1 - coalesce(prior.claims, 0)) + done.attempts,
	       done.attempt, done.latency_ms, done.error,
	       queued.ms, case when done.wait_ms >= 0 then queued.ms + done.wait_ms end, queued.ms + done.total_ms, clock_timestamp(), @owner,
	       -- The tokens of every claim's calls (null: none reported, ever).
	       case when coalesce(prior.prompt_tokens, done.prompt_tokens) is not null
	            then coalesce(prior.prompt_tokens, 0) + coalesce(done.prompt_tokens, 0) end,
	       case when coalesce(prior.completion_tokens, done.completion_tokens) is not null
	            then coalesce(prior.completion_tokens, 0) + coalesce(done.completion_tokens, 0) end,
	       -- What every claim's calls cost (null: no price known, ever),
	       -- and whether this claim's answer came from the cache.
	       case when coalesce(prior.cost_usd, done.cost_usd) is not null
	            then coalesce(prior.cost_usd, 0) + coalesce(done.cost_usd, 0) end,
	       done.cached,
	       -- --calibration's raw score, --review-below's flag and the
	       -- --cascade stage that answered (null without them).
	       done.raw_score, done.review, done.stage,
	       -- The cached part of the prompt tokens, summed as they are;
	       -- the answer's scores (a JSON array, sent as text).
	       case when coalesce(prior.cached_prompt_tokens, done.cached_prompt_tokens) is not null
	            then coalesce(prior.cached_prompt_tokens, 0) + coalesce(done.cached_prompt_tokens, 0) end,
	       done.scores::jsonb
	-- The earlier result is looked up by its key, row by row: joined
	-- plainly, the cached generic plan (made while the table was nearly
	-- empty, so a batch's results looked like one row) walked every result
	-- of the batch for each row written, a round trip's cost growing with
	-- the batch (issue 31, item 3). OFFSET 0 keeps the planner from
	-- flattening the subquery back into that join.
	from done join queued on queued.seq = done.seq
	left join lateral (
		select p.attempts, p.claims, p.prompt_tokens, p.completion_tokens, p.cost_usd, p.cached_prompt_tokens from hfsent.result p
		where p.batch_id = @batch and p.seq = done.seq
		offset 0
	) prior on true
	where done.action <> 'giveback'
	on conflict (batch_id, seq) do update set
		outcome = excluded.outcome, label = excluded.label, score = excluded.score, model = excluded.model,
		attempts = excluded.attempts, claims = excluded.claims, latency_ms = excluded.latency_ms, error = excluded.error,
		queued_ms = excluded.queued_ms, started_ms = excluded.started_ms, finished_ms = excluded.finished_ms,
		finished_at = excluded.finished_at, worker = excluded.worker,
		prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
		cost_usd = excluded.cost_usd, cached = excluded.cached, raw_score = excluded.raw_score, review = excluded.review,
		stage = excluded.stage, cached_prompt_tokens = excluded.cached_prompt_tokens, scores = excluded.scores
)
select seq from written
union all
-- Rows this worker already finished: a round trip whose answer was lost
-- (the connection dropped at its commit) is sent again; those results are
-- in, not refused.
-- Each looked up by its key, as above (OFFSET 0: an EXISTS that is not
-- turned into a join).
select done.seq from done
where done.action = 'done' and done.seq not in (select seq from written)
  and exists (select 1 from hfsent.item i where i.batch_id = @batch and i.seq = done.seq and i.state = 'done' offset 0)
  and exists (select 1 from hfsent.result r where r.batch_id = @batch and r.seq = done.seq and r.worker = @owner offset 0)
