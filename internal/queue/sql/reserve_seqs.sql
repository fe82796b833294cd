-- reserve_seqs reserves a block of @block seqs for a push (seqs order rows
-- in push order), so that the push copies its rows without holding the
-- batch row, which claims lock; it answers the block's first seq.
update hfsent.batch set next_seq = next_seq + @block where id = @batch returning next_seq - @block
