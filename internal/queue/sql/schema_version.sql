-- schema_version reads the version of the queue's schema (tern keeps it).
select version from hfsent.schema_version
