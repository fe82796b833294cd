-- drop deletes the batch with everything of it, once queue drop (or a
-- failed push removing the batch it created) holds its push turn
-- (lock_push.sql), its gate (drop_gate.sql) and its row (lock_batch.sql):
-- no worker or push transaction of the batch is under way, and those that
-- come find it gone. The tables have no foreign keys
-- to order the deletes by.
with results as (delete from hfsent.result where batch_id = @batch),
items as (delete from hfsent.item where batch_id = @batch),
inputs as (delete from hfsent.input where batch_id = @batch),
clients as (delete from hfsent.client where batch_id = @batch),
workers as (delete from hfsent.worker where batch_id = @batch),
pushes as (delete from hfsent.push where batch_id = @batch),
push_lock as (delete from hfsent.push_lock where batch_id = @batch)
delete from hfsent.batch where id = @batch
