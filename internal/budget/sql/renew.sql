-- A member's renewal, under the budget row's lock: its report, its new
-- share and charge, and its lease from the transaction's start (at or
-- after the member asked: the lease it counts from its own asking ends
-- first). locked: whether its session lock is held now (lost.sql).
insert into hfsent.budget_member as m
    (budget, id, host, pid, kind, max_calls, demand, in_flight, share, charge, rps, rps_charge, timeout_ms, safe, safe_ms, lease_until, renewed_at, renewals, locked)
values (@budget, @member, @host, @pid, @kind, @max_calls, @demand, @in_flight, @share, @charge, @rps, @rps_charge, @timeout_ms, @safe, @safe_ms,
        now() + make_interval(secs => @lease_ms / 1000.0), now(), 1,
        hfsent.budget_lock_held(hfsent.budget_lock_key(@budget, @member)))
on conflict (budget, id) do update
set max_calls   = excluded.max_calls,
    demand      = excluded.demand,
    in_flight   = excluded.in_flight,
    share       = excluded.share,
    charge      = excluded.charge,
    rps         = excluded.rps,
    rps_charge  = excluded.rps_charge,
    timeout_ms  = excluded.timeout_ms,
    safe        = excluded.safe,
    safe_ms     = excluded.safe_ms,
    lease_until = excluded.lease_until,
    renewed_at  = excluded.renewed_at,
    renewals    = m.renewals + 1,
    locked      = excluded.locked,
    lock_lost_at = null
returning locked
