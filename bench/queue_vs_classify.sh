#!/usr/bin/env bash
# The queue path against classify on the same ROWS rows (default 20,000),
# the same total cap CAP (default 64) and a provider latency of LATENCY_MS
# (default 20): classify -c CAP, then WORKERS workers (default 4) of -c
# CAP/WORKERS under --global-cap CAP. Prints both rates and their ratio.
#   bench/queue_vs_classify.sh [ROWS]
# With the server on this machine it also prints the server's CPU (all its
# processes) during the queue run.
set -euo pipefail
rows=${1:-20000}
cap=${CAP:-64}; workers=${WORKERS:-4}; latency_ms=${LATENCY_MS:-20}
source "$(dirname "$0")/lib.sh"
new_db
gen_csv "$rows" "$work/in.csv" "review: fine"
start_fake -latency "${latency_ms}ms"
ep="http://$(fake_addr)"

start=$(date +%s.%N)
"$work/hfsent" classify "$work/in.csv" -o "$work/out.csv" --endpoint "$ep" -c "$cap" --retries 0 --no-dedupe --no-progress 2>"$work/classify.log"
end=$(date +%s.%N)
classify_rps=$(echo "$rows / ($end - $start)" | bc -l)

"$work/hfsent" queue push "$work/in.csv" --db "$db" --batch bench --global-cap "$cap" --no-progress 2>/dev/null
pg0=$(pg_cpu_ticks)
start=$(date +%s.%N)
pids=()
for i in $(seq "$workers"); do
  "$work/hfsent" worker --db "$db${DBOPTS:-}" --batch bench --endpoint "$ep" -c $((cap / workers)) --retries 0 --no-dedupe \
    --exit-when-done --no-progress --log-level ${WLOG:-warn} 2>"$work/w$i.log" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
[[ -n ${WLOG:-} ]] && tail -n 2 "$work"/w*.log
end=$(date +%s.%N)
pg1=$(pg_cpu_ticks)
queue_rps=$(echo "$rows / ($end - $start)" | bc -l)
ideal=$(echo "$cap * 1000 / $latency_ms" | bc -l)
printf 'rows=%d cap=%d latency=%dms ideal=%.0f rows/s\n' "$rows" "$cap" "$latency_ms" "$ideal"
printf 'classify -c %d:                         %.0f rows/s (wall clock, process start included)\n' "$cap" "$classify_rps"
printf 'queue, %d workers -c %d, --global-cap %d: %.0f rows/s (wall clock, process start included)\n' "$workers" $((cap / workers)) "$cap" "$queue_rps"
printf 'queue/classify = %.3f\n' "$(echo "$queue_rps / $classify_rps" | bc -l)"
if [[ -n $pg0 && -n $pg1 ]]; then
  hz=$(getconf CLK_TCK)
  printf 'postgres CPU during the queue run: %.2f s, %.0f us/row (local server, from /proc)\n' \
    "$(echo "($pg1 - $pg0) / $hz" | bc -l)" "$(echo "($pg1 - $pg0) * 1000000 / $hz / $rows" | bc -l)"
fi
