-- new_ids_analyze gives the planner the new ids' statistics.
analyze pg_temp.hfsent_push_ids
