-- status_clients lists the ten busiest clients of the batch (rows running
-- under an unexpired lease, then pending), with how many clients have rows
-- left.
select client,
       count(*) filter (where state = 'running' and lease_until > clock_timestamp()) as running,
       count(*) filter (where state = 'pending') as pending,
       count(*) over ()
from hfsent.item where batch_id = @batch and state in ('pending', 'running')
group by client order by running desc, pending desc, client limit 10
