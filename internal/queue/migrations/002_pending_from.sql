-- client.pending_from: no row of the client below this seq is pending. A
-- claim probes the pending index from there: a row claimed or done leaves
-- a dead entry at the front of that index until VACUUM, and walking them
-- all made every claim cost as much as the rows done so far.
--
-- Only transactions holding the batch row move it: a claim raises it past
-- the rows it saw pending and took; whatever makes a row pending again (a
-- retry, a give-back, a rescue, a reconcile) lowers it. Push appends rows
-- above it.
alter table hfsent.client add column pending_from bigint not null default 0;

---- create above / drop below ----

alter table hfsent.client drop column pending_from;
