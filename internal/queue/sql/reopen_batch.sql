-- reopen_batch marks the batch not finished: a push brought rows to
-- classify.
update hfsent.batch set finished_at = null where id = @batch
