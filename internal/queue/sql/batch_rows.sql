-- batch_rows counts the rows pushed into the batch (every push's).
select coalesce(sum(rows), 0) from hfsent.push where batch_id = @batch
