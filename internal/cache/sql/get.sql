-- get: the entries held for a batch of keys (the caller checks each).
select key, at_ms, val, sum from hfsent.cache where key = any(@keys::bytea[])
