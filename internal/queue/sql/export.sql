-- export reads every row of the batch in push order, for the results CSV:
-- its input, state and result so far (a row not done is written
-- not_attempted), and its text when @include_text; its raw score, review
-- flag and cascade stage (null when the worker wrote none) and its gold
-- label (null when the push named no gold column); its cached prompt
-- tokens and scores (null when none).
select inp.request_id, i.state, coalesce(r.outcome, ''), coalesce(r.label, ''), coalesce(r.score, 0),
       coalesce(r.model, ''),
       -- Claims lost with their worker since the last result, one call
       -- each (see result.claims); a claim running now is not counted yet.
       coalesce(r.attempts, 0) + greatest(0, i.attempt - coalesce(r.claims, 0) - case when i.state = 'running' then 1 else 0 end),
       coalesce(r.latency_ms, 0), coalesce(r.error, ''),
       coalesce(r.queued_ms, 0), coalesce(r.started_ms, -1), coalesce(r.finished_ms, 0),
       case when @include_text::bool then inp.text else '' end,
       r.prompt_tokens, r.completion_tokens, r.cost_usd, coalesce(r.cached, false),
       r.raw_score, r.review, inp.gold, r.stage, r.cached_prompt_tokens, r.scores::text
from hfsent.item i
join hfsent.input inp on inp.batch_id = i.batch_id and inp.seq = i.seq
left join hfsent.result r on r.batch_id = i.batch_id and r.seq = i.seq
where i.batch_id = @batch
order by i.seq
