-- result.stage: the number (from 1) of the --cascade stage that answered
-- the row, or where it ended (null without a cascade, or for a row no
-- stage was asked for). export writes the stage column when some row has
-- one.
alter table hfsent.result add column stage smallint;

---- create above / drop below ----

alter table hfsent.result drop column stage;
