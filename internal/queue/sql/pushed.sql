-- pushed counts the pushes of the file @digest (its SHA-256) into the batch:
-- the same file pushed again adds nothing.
select count(*) from hfsent.push where batch_id = @batch and digest = @digest
