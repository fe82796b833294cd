-- create_batch creates the batch @name with the settings of its first
-- push, and its push turn (push_lock); it answers the new batch's id, or no
-- row when a batch of that name exists.
with b as (
	insert into hfsent.batch (name, model, global_cap, client_column, client_cap, global_rps, tokens, lease_ms, max_attempts, max_chars,
	                          provider, labels)
	values (@name, @model, @global_cap, @client_column::text, @client_cap::int, @global_rps::float8, coalesce(@global_rps::float8, 0), @lease_ms, @max_attempts, @max_chars,
	        @provider, coalesce(@labels::text[], '{}'))
	on conflict (name) do nothing
	returning id
), l as (insert into hfsent.push_lock (batch_id) select id from b)
select id from b
