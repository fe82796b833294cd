-- lock_push takes the batch's turn for pushes (its push_lock row): a push
-- holds it for its whole transaction, and queue drop (or a failed push
-- removing the batch it created) takes it first. No row: the batch was
-- dropped.
select 1 from hfsent.push_lock where batch_id = @batch for update
