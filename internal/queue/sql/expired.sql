-- expired lists the rows of the batch running under a lease that expired
-- (their worker stopped, or stalled past it), for the rescue (rescue.sql):
-- read without a lock, so that the worker gives each its backoff
-- (rowBackoff, the rule a failed row's retry follows) before the rescue
-- takes them, checking each again.
select seq, attempt from hfsent.item
where batch_id = @batch and state = 'running' and lease_until < clock_timestamp()
