-- put: entries stored, each replacing any under its key and becoming the
-- newest (seq); it answers how many keys were new, for the count the size
-- bound reads.
with put as (
	insert into hfsent.cache as c (key, at_ms, val, sum)
	select * from unnest(@keys::bytea[], @at_ms::bigint[], @vals::bytea[], @sums::bytea[])
	on conflict (key) do update set at_ms = excluded.at_ms, val = excluded.val, sum = excluded.sum, seq = default
	returning (xmax = 0) as inserted
)
update hfsent.cache_totals set entries = entries + (select count(*) from put where inserted)
returning entries
