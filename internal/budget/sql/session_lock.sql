-- A member's session lock, on a connection of its own that it keeps open
-- (member.go, hold): released by PostgreSQL when that session ends, so
-- that a renewal can tell a member whose process is gone (lost.sql).
-- Keepalives past the member's safe window: a cut-off member's session
-- (and lock) outlasts the window in which it may still send.
select pg_try_advisory_lock(hfsent.budget_lock_key(@budget, @member)),
       set_config('tcp_keepalives_idle', (@keepalive_s::bigint)::text, false),
       set_config('tcp_keepalives_interval', '10', false),
       set_config('tcp_keepalives_count', '6', false),
       set_config('idle_session_timeout', '0', false)
