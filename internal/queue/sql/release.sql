-- release gives back reservations of this worker (@owner) that it will not
-- start: they stay pending, with no lease, for any worker to claim.
update hfsent.item i set lease_owner = null, lease_until = null
where i.batch_id = @batch and i.seq = any(@seqs::bigint[])
-- Reserved by @owner: pending and leased. Written "not running" rather
-- than "pending" (a row done has no lease owner) because "pending" leads
-- the planner, while the table has no statistics yet (right after a push),
-- to walk the whole pending index instead of looking the rows up by their
-- keys.
-- shared: reserved_by_owner (release, promote, claim_one)
  and i.state <> 'running' and i.lease_owner = @owner
-- end shared
