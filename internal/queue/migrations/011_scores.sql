-- result.cached_prompt_tokens: the part of prompt_tokens the server read
-- from its prompt cache (a chat model's usage; summed over a row's claims
-- as prompt_tokens is; null when none was reported). result.scores: the
-- labels the answer scored and their scores, best first, as a JSON array
-- of {"label", "score"} (a worker with --top-k, its first K, or with
-- --multi-label; null without them). export writes the
-- cached_prompt_tokens and scores columns when some row has them, as
-- classify writes them.
alter table hfsent.result add column cached_prompt_tokens integer, add column scores jsonb;

---- create above / drop below ----

alter table hfsent.result drop column scores, drop column cached_prompt_tokens;
