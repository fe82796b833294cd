-- status_outcomes counts the batch's rows done by outcome.
select r.outcome, count(*) from hfsent.item i join hfsent.result r using (batch_id, seq)
where i.batch_id = @batch and i.state = 'done' group by r.outcome
