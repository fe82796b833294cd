-- batch.provider and batch.labels: the kind of model a batch is for and
-- the labels its answers are chosen from. '' is a text-classification
-- model (hf, tei, local: every batch before these columns); 'chat' a chat
-- model asked to answer with one of labels. A worker of another kind, or
-- with other labels, is refused, as one with another model is.
alter table hfsent.batch add column provider text not null default '';
alter table hfsent.batch add column labels text[] not null default '{}';
-- result.prompt_tokens, completion_tokens: the tokens a chat model's calls
-- for the row cost, every claim's added up; null when none was reported.
alter table hfsent.result add column prompt_tokens int;
alter table hfsent.result add column completion_tokens int;

---- create above / drop below ----

alter table hfsent.result drop column completion_tokens;
alter table hfsent.result drop column prompt_tokens;
alter table hfsent.batch drop column labels;
alter table hfsent.batch drop column provider;
