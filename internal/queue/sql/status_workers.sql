-- status_workers lists the workers whose heartbeat came in the last
-- minute, with how long ago (milliseconds).
select id, host, pid, extract(epoch from clock_timestamp() - seen_at) * 1000
from hfsent.worker where batch_id = @batch and seen_at > clock_timestamp() - interval '1 minute' order by id
