-- new_ids_fill lists the ids of the push's rows (from seq @base) in
-- new_ids_table.sql's table.
insert into pg_temp.hfsent_push_ids
select hashtextextended(btrim(request_id), 0), btrim(request_id), request_id
from hfsent.input where batch_id = @batch and seq >= @base
