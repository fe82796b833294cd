#!/usr/bin/env bash
# The global cap seen from the provider: WORKERS workers (default 4) of -c
# CONC (default 8) under --global-cap CAP (default 8), ROWS rows (default
# 5,000) at LATENCY_MS (default 20); the fake reports the most calls it held
# at once over the whole run (max_in_flight), which must be CAP.
#   bench/queue_cap.sh [ROWS]
set -euo pipefail
rows=${1:-5000}
cap=${CAP:-8}; workers=${WORKERS:-4}; conc=${CONC:-8}; latency_ms=${LATENCY_MS:-20}
source "$(dirname "$0")/lib.sh"
new_db
gen_csv "$rows" "$work/in.csv" "review"
"$work/hfsent" queue push "$work/in.csv" --db "$db" --batch bench --global-cap "$cap" --no-progress 2>/dev/null
start_fake -latency "${latency_ms}ms"
start=$(date +%s.%N)
pids=()
for i in $(seq "$workers"); do
  "$work/hfsent" worker --db "$db" --batch bench --endpoint "http://$(fake_addr)" -c "$conc" --retries 0 --no-dedupe \
    --exit-when-done --no-progress --log-level warn 2>"$work/w$i.log" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
end=$(date +%s.%N)
stop_fake
printf '%d workers -c %d, --global-cap %d, %d rows at %dms in %.2fs (ideal %.2fs)\n' "$workers" "$conc" "$cap" "$rows" "$latency_ms" \
  "$(echo "$end - $start" | bc -l)" "$(echo "$rows * $latency_ms / 1000 / $cap" | bc -l)"
grep -o 'max_in_flight=[0-9]*' "$work/fake.log" | sed 's/^/fake provider: /'
