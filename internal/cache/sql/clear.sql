-- clear: the entries stored before @before_ms go (all, with -1), and the
-- count is set again from what is left.
with gone as (
	delete from hfsent.cache where @before_ms::bigint < 0 or at_ms < @before_ms returning 1
)
update hfsent.cache_totals set entries = (select count(*) from hfsent.cache) - (select count(*) from gone)
returning (select count(*) from gone)
