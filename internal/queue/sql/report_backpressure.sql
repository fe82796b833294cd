-- report_backpressure shares this worker's 429 pause (@pause_ms) and open
-- breaker (@open_ms) with the batch, as durations from now by the database
-- clock (the workers' clocks need not agree), never shortening one already
-- set; the notification wakes the workers waiting for a poll, so that they
-- hold their calls too.
with reported as (
	update hfsent.batch set
		paused_until = case when @pause_ms::bigint > 0
		                    then greatest(coalesce(paused_until, '-infinity'), clock_timestamp() + @pause_ms * interval '1 millisecond')
		                    else paused_until end,
		breaker_open_until = case when @open_ms::bigint > 0
		                          then greatest(coalesce(breaker_open_until, '-infinity'), clock_timestamp() + @open_ms * interval '1 millisecond')
		                          else breaker_open_until end
	where id = @batch
	returning id
)
select pg_notify(@channel, 'backpressure') from reported
