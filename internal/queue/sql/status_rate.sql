-- status_rate counts the rows workers finished in the last minute (a row
-- finished at push, invalid_input, has no worker), and how long the
-- batch's shared pause and breaker still hold (milliseconds, 0: not).
select (select count(*) from hfsent.result r join hfsent.item i using (batch_id, seq)
        where r.batch_id = @batch and r.finished_at > clock_timestamp() - interval '1 minute' and i.state = 'done' and r.worker <> ''),
       coalesce(extract(epoch from paused_until - clock_timestamp()) * 1000, 0),
       coalesce(extract(epoch from breaker_open_until - clock_timestamp()) * 1000, 0)
from hfsent.batch where id = @batch
