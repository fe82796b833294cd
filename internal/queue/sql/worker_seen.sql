-- worker_seen records that this worker is alive, for queue status. No row
-- is written when the batch was dropped (past the gate, the batch row is
-- there or gone): that is how the heartbeat finds it gone.
insert into hfsent.worker (batch_id, id, host, pid)
select @batch, @owner, @host, @pid from hfsent.batch where id = @batch
on conflict (batch_id, id) do update set seen_at = clock_timestamp()
