-- Members whose lease passed long enough ago that every call they started
-- under it has ended (the lease, then their attempt timeout, then a
-- grace): their charge is handed back. now() is the transaction's start,
-- at or before the lock was taken: a reclaim is never early.
delete from hfsent.budget_member
where budget = @budget
  and lease_until + make_interval(secs => (timeout_ms + @grace_ms) / 1000.0) < now()
