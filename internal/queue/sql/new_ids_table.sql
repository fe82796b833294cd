-- new_ids_table creates the table of the ids a push brings, for
-- overlapCheck (push.go), in the push's own transaction: trimmed, as
-- written, and a hash of the trimmed id, indexed (so an id of any length
-- fits).
create temp table hfsent_push_ids (h bigint not null, id text not null, raw text not null) on commit drop
