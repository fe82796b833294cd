-- result.claims: the claims of the row that its attempts account for. A
-- claim whose worker stopped without writing a result (killed, or stalled
-- past its lease) shows at the row's next result or rescue as a claim
-- between this count and the row's attempt, and is counted as one provider
-- call. Rows written before this column count as accounted for.
alter table hfsent.result add column claims int not null default 0;
update hfsent.result r
set claims = greatest(0, i.attempt - case when i.state = 'running' then 1 else 0 end)
from hfsent.item i
where i.batch_id = r.batch_id and i.seq = r.seq;

---- create above / drop below ----

alter table hfsent.result drop column claims;
