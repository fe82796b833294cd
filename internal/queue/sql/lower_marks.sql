-- lower_marks runs, holding the batch row, in every round trip whose
-- results make rows pending again (@seqs: a retry, a give-back; rows that
-- are not pending are passed over): it lowers their clients' pending_from
-- (below which a claim's probe does not look) to them. A claim that raised
-- pending_from past them without seeing them (they were not pending yet in
-- its snapshot) has committed by then, and the next one sees them.
update hfsent.client c set pending_from = lowest.seq
from (select i.client, min(i.seq) as seq from hfsent.item i
      where i.batch_id = @batch and i.seq = any(@seqs::bigint[]) and i.state = 'pending'
      group by i.client) lowest
where c.batch_id = @batch and c.client = lowest.client and lowest.seq < c.pending_from
