-- input_id: a push into a batch that has rows checks its ids against the
-- batch's, compared as trimmed. Without an index on the id as compared the
-- check joined the batch's rows to each other: quadratic (20,000 rows
-- against 20,000 took 43 s). The key is a 64-bit hash of the trimmed id,
-- not the id, so an id of any length fits in a B-tree entry; the check
-- compares the ids themselves on the rows the index finds.
create index input_id on hfsent.input (batch_id, hashtextextended(btrim(request_id), 0));

---- create above / drop below ----

drop index hfsent.input_id;
