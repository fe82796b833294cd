#!/usr/bin/env bash
# queue push of ROWS rows (default 1,000,000) into a fresh database: the
# rows per second push reports and the size of the database it left.
#   bench/queue_push.sh [ROWS]
set -euo pipefail
rows=${1:-1000000}
source "$(dirname "$0")/lib.sh"
new_db
gen_csv "$rows" "$work/in.csv" "a customer review of moderate length, number"
ls -l "$work/in.csv" | awk '{printf "input: %d bytes\n", $5}'
start=$(date +%s.%N)
"$work/hfsent" queue push "$work/in.csv" --db "$db" --batch bench --no-progress
end=$(date +%s.%N)
printf 'queue push: %d rows in %.1fs wall (%.0f rows/s, process start and file check included)\n' \
  "$rows" "$(echo "$end - $start" | bc -l)" "$(echo "$rows / ($end - $start)" | bc -l)"
psql "$db" -Atc "select 'database size: ' || pg_size_pretty(pg_database_size(current_database()))"
psql "$db" -Atc "select '  ' || c.relname || ': ' || pg_size_pretty(pg_total_relation_size(c.oid))
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = 'hfsent' and c.relkind = 'r' order by pg_total_relation_size(c.oid) desc"
