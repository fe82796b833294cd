-- A fleet budget member's safe share (docs/guides/budget.md, "When the
-- database is away"): what it may go on sending with once its lease ends
-- without a renewal, for safe_ms more, with no database.
--
-- safe is what counts against the cap for it once its lease has passed:
-- the larger of the safe share granted at its last renewal and the one it
-- still applied when it asked (it learns of a new one only when the answer
-- comes). A safe share is never above the member's share, so it is always
-- within its charge: the charges sum to at most the cap, so do the safe
-- shares. A member whose lease passed keeps its charge until its calls
-- must have ended (lease_until + timeout_ms, and a grace), then only its
-- safe share, until lease_until + safe_ms + timeout_ms (and the grace),
-- when its row is deleted.
alter table hfsent.budget_member add column safe int not null default 0;
alter table hfsent.budget_member add column safe_ms int not null default 0;

---- create above / drop below ----

alter table hfsent.budget_member drop column safe_ms;
alter table hfsent.budget_member drop column safe;
