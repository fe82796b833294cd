-- add_clients records the clients a push brings (@clients), for the claims
-- to walk.
insert into hfsent.client (batch_id, client) select @batch, c from unnest(@clients::text[]) c on conflict do nothing
