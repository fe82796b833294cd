#!/usr/bin/env bash
# Claims per second: WORKERS workers (default 4) of -c CONC (default 64)
# take ROWS rows (default 100,000) through a fake provider that answers at
# once, under a global cap of WORKERS×CONC. Every row is one claim, one call
# and one fenced result: rows/s is the queue's own rate.
#   bench/queue_claims.sh [ROWS]
set -euo pipefail
rows=${1:-100000}
workers=${WORKERS:-4}; conc=${CONC:-64}
source "$(dirname "$0")/lib.sh"
new_db
gen_csv "$rows" "$work/in.csv" "review"
"$work/hfsent" queue push "$work/in.csv" --db "$db" --batch bench --global-cap $((workers * conc)) --no-progress 2>/dev/null
start_fake -latency 0
start=$(date +%s.%N)
pids=()
for i in $(seq "$workers"); do
  "$work/hfsent" worker --db "$db${DBOPTS:-}" --batch bench --endpoint "http://$(fake_addr)" -c "$conc" --retries 0 \
    --no-dedupe --exit-when-done --no-progress --log-level warn 2>"$work/w$i.log" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
end=$(date +%s.%N)
done_rows=$(psql "$db" -Atc "select count(*) from hfsent.result where outcome = 'success'")
printf 'queue claims: %d workers -c %d, %d rows success in %.2fs: %.0f rows/s\n' \
  "$workers" "$conc" "$done_rows" "$(echo "$end - $start" | bc -l)" "$(echo "$done_rows / ($end - $start)" | bc -l)"
