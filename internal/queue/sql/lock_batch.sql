-- lock_batch takes the batch row, the lock every claim takes, before
-- anything of a round trip counts or reads the batch (only the fenced
-- results, and the swaps they make, come before it: they hold only their
-- own rows), so claims of one batch are serialised; every count is made in
-- later statements, whose snapshots are taken after the lock is held
-- (counting in this statement would over-admit under READ COMMITTED, whose
-- snapshot is taken before the lock wait). The rescue (rescue.sql) and
-- everything that makes rows pending again hold it too (lower_marks.sql).
--
-- It answers how long the batch's shared pause and breaker still hold, in
-- milliseconds (0: not), by the database clock after the lock; no row: the
-- batch was dropped (past the gate it is there, or gone).
select coalesce(extract(epoch from paused_until - clock_timestamp()) * 1000, 0),
       coalesce(extract(epoch from breaker_open_until - clock_timestamp()) * 1000, 0)
from hfsent.batch
where id = @batch
for update
