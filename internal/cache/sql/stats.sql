-- stats: what the cache holds (counted, not the estimate), its size on
-- disk with its indexes, and its totals.
select (select count(*) from hfsent.cache), (select min(at_ms) from hfsent.cache), (select max(at_ms) from hfsent.cache),
       pg_total_relation_size('hfsent.cache'), t.hits, t.saved_prompt, t.saved_completion, t.saved_usd, t.costed
from hfsent.cache_totals t
