-- renew renews the leases of the rows this worker (@owner) holds (@held),
-- running or reserved, for another @lease_ms. A row it does not list (a
-- claim whose answer was lost) is not renewed: it expires and is redone.
-- It runs in a transaction of its own, before the rescue, so that this
-- worker's rows are renewed, not rescued.
update hfsent.item set lease_until = clock_timestamp() + @lease_ms * interval '1 millisecond'
where batch_id = @batch and seq = any(@held::bigint[]) and state in ('running', 'pending') and lease_owner = @owner
