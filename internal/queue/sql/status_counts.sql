-- status_counts counts the batch's rows by state: pending (of them,
-- reserved by a worker under an unexpired lease), running under an
-- unexpired lease, running past it (rescued at the next heartbeat), done.
select count(*) filter (where state = 'pending'),
       count(*) filter (where state = 'pending' and lease_until > clock_timestamp()),
       count(*) filter (where state = 'running' and lease_until > clock_timestamp()),
       count(*) filter (where state = 'running' and lease_until <= clock_timestamp()),
       count(*) filter (where state = 'done')
from hfsent.item where batch_id = @batch
