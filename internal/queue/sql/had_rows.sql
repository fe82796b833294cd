-- had_rows says whether anything was pushed into the batch: a push checks
-- its new ids against the batch's (overlapCheck in push.go) only then, and
-- a failed push removes the batch it created only when nothing was.
select exists (select 1 from hfsent.push where batch_id = @batch)
