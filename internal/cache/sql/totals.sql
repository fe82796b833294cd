-- totals: a run's hits and savings added to the cache's own.
update hfsent.cache_totals set hits = hits + @hits, saved_prompt = saved_prompt + @saved_prompt,
	saved_completion = saved_completion + @saved_completion, saved_usd = saved_usd + @saved_usd,
	costed = costed or @costed
