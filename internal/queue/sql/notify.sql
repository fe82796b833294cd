-- notify wakes the workers of a batch waiting for a poll (LISTEN on
-- @channel): rows pushed, the batch dropped.
select pg_notify(@channel, @what)
