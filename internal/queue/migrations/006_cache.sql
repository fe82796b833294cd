-- The response cache of a fleet (classify, serve and workers with --db):
-- a row's final, usable answer under the key of its request (SHA-256 of
-- the provider kind, the model, the URL without credentials and the
-- body), so that no member pays twice for the same request.
--
-- cache: seq orders the entries by when they were stored (an entry
-- stored again is the newest): past --cache-max-size the oldest go. val
-- is the encoded answer, sum its checksum (over key, at_ms and val),
-- checked on every read as on the file cache.
create table hfsent.cache (
    key   bytea primary key,
    seq   bigint generated always as identity,
    at_ms bigint not null,
    val   bytea not null,
    sum   bytea not null
);
create index cache_seq on hfsent.cache (seq);

-- cache_totals: one row; the entries stored (an estimate kept as they
-- come and go, for the size bound) and the hits and what they saved.
create table hfsent.cache_totals (
    id               int primary key default 1 check (id = 1),
    entries          bigint not null default 0,
    hits             bigint not null default 0,
    saved_prompt     bigint not null default 0,
    saved_completion bigint not null default 0,
    saved_usd        double precision not null default 0,
    costed           bool not null default false
);
insert into hfsent.cache_totals default values;

-- result.cost_usd: what the row's calls cost in USD at the worker's
-- prices (null: none known); result.cached: answered from the cache.
alter table hfsent.result add column cost_usd double precision;
alter table hfsent.result add column cached bool not null default false;

-- budget.max_spend: the fleet's limit in USD on what its members spend
-- (0: none); spent: what they have spent since the budget was made, each
-- member adding its own at its renewals.
alter table hfsent.budget add column max_spend double precision not null default 0 check (max_spend >= 0);
alter table hfsent.budget add column spent double precision not null default 0;

---- create above / drop below ----

alter table hfsent.budget drop column spent;
alter table hfsent.budget drop column max_spend;
alter table hfsent.result drop column cached;
alter table hfsent.result drop column cost_usd;
drop table hfsent.cache_totals;
drop table hfsent.cache;
