-- input.gold: the row's gold label, when the push named a --gold-column
-- (null otherwise): queue export compares the results with it.
-- result.raw_score: the model's own score when the worker wrote a
-- calibrated one (--calibration; NaN when the model gave none), null
-- without a calibration; result.review: whether the row is marked for
-- review (--review-below), null without the flag. export writes the
-- raw_score and review columns when some row has them.
alter table hfsent.input add column gold text;
alter table hfsent.result add column raw_score double precision, add column review boolean;

---- create above / drop below ----

alter table hfsent.result drop column review, drop column raw_score;
alter table hfsent.input drop column gold;
