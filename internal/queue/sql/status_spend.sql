-- status_spend: what the batch's rows cost so far (every claim's calls, at
-- the workers' prices; rows with no price known count as nothing, and
-- are counted apart), the tokens reported, and the rows the cache
-- answered.
select coalesce(sum(r.cost_usd), 0), count(r.cost_usd), count(*) filter (where r.cached),
       coalesce(sum(r.prompt_tokens), 0), coalesce(sum(r.completion_tokens), 0)
from hfsent.result r
where r.batch_id = @batch
