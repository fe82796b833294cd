-- reconcile gives back the rows leased to this worker (@owner) that it does
-- not hold (@held): claims committed in a round trip whose answer was lost
-- (the connection dropped at its commit). Its running rows go back to
-- pending as they were, their attempt not counted, and their clients'
-- pending_from is lowered to them (this runs holding the batch row, see
-- lower_marks.sql); its reservations lose their lease (pending_from never
-- passed them). Those are found by a walk of the batch's rows: this runs
-- only after a round trip failed.
with given_back as (
	update hfsent.item set state = 'pending', attempt = attempt - 1, lease_owner = null, lease_until = null
	where batch_id = @batch and state = 'running' and lease_owner = @owner and seq <> all(@held::bigint[])
	returning client, seq
),
released as (
	update hfsent.item set lease_owner = null, lease_until = null
	where batch_id = @batch and state = 'pending' and lease_owner = @owner and seq <> all(@held::bigint[])
)
update hfsent.client c set pending_from = lowest.seq
from (select client, min(seq) as seq from given_back group by client) lowest
where c.batch_id = @batch and c.client = lowest.client and lowest.seq < c.pending_from
