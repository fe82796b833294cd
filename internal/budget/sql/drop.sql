-- budget drop: the budget and its members (on delete cascade).
delete from hfsent.budget
where name = @name
