-- renew renews the leases of the rows this worker (@owner) holds (@held),
-- running or reserved, for another @lease_ms, and answers the rows it
-- renewed. A row it does not list (a claim whose answer was lost) is not
-- renewed: it expires and is redone. Nor is a row whose lease already
-- expired: from then on its place under the caps was free, and another
-- worker may have taken it (or the row itself, reserved), so a worker that
-- was stopped or cut off past its lease does not revive it; the row is
-- rescued, or its result written if it comes first (the fence). It runs in
-- a transaction of its own, before the rescue, so that this worker's rows
-- are renewed, not rescued.
with clock as (select clock_timestamp() as now)
update hfsent.item set lease_until = clock.now + @lease_ms * interval '1 millisecond'
from clock
where batch_id = @batch and seq = any(@held::bigint[]) and state in ('running', 'pending') and lease_owner = @owner
  and lease_until > clock.now
returning seq
