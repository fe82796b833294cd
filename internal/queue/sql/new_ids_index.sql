-- new_ids_index indexes the new ids by their hash, for the probe of
-- overlapCheck (push.go).
create index on pg_temp.hfsent_push_ids (h)
