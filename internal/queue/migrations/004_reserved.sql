-- Reserved for issue 20 (its migration takes number 4). tern needs the
-- numbers without a gap, so this branch holds the place with a no-op; the
-- merge replaces this file with issue 20's 004.
select 1;

---- create above / drop below ----

select 1;
