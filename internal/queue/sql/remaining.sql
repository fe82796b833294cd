-- remaining says whether the batch still has rows pending or running, and
-- marks it finished when it has none, waking the workers waiting for a
-- poll, so that --exit-when-done ends them all at once, not a poll later.
with rows_left as (
	select exists (select 1 from hfsent.item where batch_id = @batch and state = 'pending')
	    or exists (select 1 from hfsent.item where batch_id = @batch and state = 'running') as any_left
),
finished as (
	update hfsent.batch set finished_at = clock_timestamp()
	where id = @batch and finished_at is null and not (select any_left from rows_left)
	returning id
),
notified as (select pg_notify(@channel, 'done') from finished)
select any_left from rows_left, (select count(*) from notified) n
