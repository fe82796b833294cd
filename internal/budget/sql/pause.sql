-- A member saw a 429 with Retry-After: every member pauses as long. The
-- pause only grows (greatest ignores a NULL).
update hfsent.budget
set paused_until = greatest(paused_until, now() + make_interval(secs => @ms / 1000.0))
where name = @budget
