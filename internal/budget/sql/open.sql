-- A member's breaker opened: it is open for every member until it probes,
-- and the member that opened it is the one that probes.
update hfsent.budget
set open_until = now() + make_interval(secs => @ms / 1000.0),
    open_by    = @member
where name = @budget
  and (open_until is null or open_until < now() + make_interval(secs => @ms / 1000.0))
