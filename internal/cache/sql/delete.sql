-- delete: entries found damaged go.
with gone as (
	delete from hfsent.cache where key = any(@keys::bytea[]) returning 1
)
update hfsent.cache_totals set entries = greatest(0, entries - (select count(*) from gone))
