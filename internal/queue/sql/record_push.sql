-- record_push records a push: its file (@digest, its SHA-256; @source, as
-- named), its first seq and its rows.
insert into hfsent.push (batch_id, digest, source, first_seq, rows) values (@batch, @digest, @source, @first_seq, @rows)
