-- schema_exists says whether the database has the queue's schema version
-- table (@table), that is a queue.
select to_regclass(@table) is not null
