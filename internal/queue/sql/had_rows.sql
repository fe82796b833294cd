-- had_rows says whether anything was pushed into the batch before: only
-- then are the new ids checked against the batch's (overlapCheck in push.go).
select exists (select 1 from hfsent.push where batch_id = @batch)
