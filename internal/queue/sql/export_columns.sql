-- export_columns says what a batch's export holds beyond classify's
-- columns: a raw score (a worker with --calibration wrote one), a review
-- flag (a worker with --review-below), gold labels (the push named a
-- --gold-column), a cascade's stage (a worker with --cascade), cached
-- prompt tokens (a chat model reported usage), scores (a worker with
-- --top-k or --multi-label). Each probe stops at the first row that has
-- one.
select exists (select 1 from hfsent.result where batch_id = @batch and raw_score is not null),
       exists (select 1 from hfsent.result where batch_id = @batch and review is not null),
       exists (select 1 from hfsent.input where batch_id = @batch and gold is not null),
       exists (select 1 from hfsent.result where batch_id = @batch and stage is not null),
       exists (select 1 from hfsent.result where batch_id = @batch and cached_prompt_tokens is not null),
       exists (select 1 from hfsent.result where batch_id = @batch and scores is not null)
