-- evict: the oldest @n entries go (past --cache-max-size).
with gone as (
	delete from hfsent.cache where seq in (select seq from hfsent.cache order by seq limit @n)
	returning 1
)
update hfsent.cache_totals set entries = greatest(0, entries - (select count(*) from gone))
