#!/usr/bin/env bash
# The global cap through a kill -9 and a stopped worker (issue 25, item 1),
# RUNS times (default 12): three workers of -c 4 and --lease LEASE (2s) on a
# batch pushed with --global-cap CAP (6), ROWS rows (300) at LATENCY_MS (50).
# Worker 3 is stopped (SIGSTOP) at STOP_AT seconds (1.0) for STOP_FOR (3),
# then continued; worker 2 is killed with -9 at KILL_AT (1.5). Per run it
# prints the fake provider's own peak of calls in flight and whether every
# row ended once, success; then "N of RUNS over cap". No response cache: the
# runs share a database, and answers cached by one would hide the next's calls.
#   RUNS=30 bench/queue_faults.sh
#   BIN=./hfsent BASE_BIN=/tmp/hfsent-base bench/queue_faults.sh   # after, then before
# BIN is the build measured (default: this tree); BASE_BIN, when set, is
# measured too, after it, in the same sitting.
set -euo pipefail
runs=${RUNS:-12}; rows=${ROWS:-300}; cap=${CAP:-6}; lease=${LEASE:-2s}; latency_ms=${LATENCY_MS:-50}
stop_at=${STOP_AT:-1.0}; stop_for=${STOP_FOR:-3}; kill_at=${KILL_AT:-1.5}
[[ -n ${BIN:-} ]] && HFSENT_BIN=$BIN
source "$(dirname "$0")/lib.sh"
[[ -n ${BASE_BIN:-} ]] && cp "$BASE_BIN" "$work/hfsent-base"
new_db
gen_csv "$rows" "$work/in.csv" "review"

# at T: sleeps until T seconds after $start.
at() { local d; d=$(echo "$start + $1 - $(date +%s.%N)" | bc -l); [[ $d == -* ]] || sleep "$d"; }

# one_run BIN BATCH: prints the provider's peak and the rows ended once.
one_run() {
  local bin=$1 batch=$2 pids=() i
  "$bin" queue push "$work/in.csv" --db "$db" --batch "$batch" --global-cap "$cap" --no-progress 2>/dev/null
  start_fake -latency "${latency_ms}ms"
  start=$(date +%s.%N)
  for i in 1 2 3; do
    "$bin" worker --db "$db" --batch "$batch" --endpoint "http://$(fake_addr)" -c 4 --lease "$lease" --no-dedupe --no-cache \
      --exit-when-done --no-progress --log-level warn 2>"$work/$batch.w$i.log" &
    pids+=($!)
  done
  at "$stop_at"; kill -STOP "${pids[2]}"
  at "$kill_at"; kill -9 "${pids[1]}"
  at "$(echo "$stop_at + $stop_for" | bc -l)"; kill -CONT "${pids[2]}"
  wait "${pids[0]}" "${pids[2]}" || echo "a worker failed: see $work/$batch.w*.log" >&2
  wait "${pids[1]}" 2>/dev/null || true
  stop_fake
  local peak once
  peak=$(grep -o 'max_in_flight=[0-9]*' "$work/fake.log" | cut -d= -f2)
  "$bin" queue export --db "$db" --batch "$batch" -o "$work/$batch.csv" 2>/dev/null
  # Rows exported once each, success (request_id is the first column).
  once=$(awk -F, 'NR > 1 && /,success,/ { n[$1]++ } END { k = 0; for (id in n) if (n[id] == 1) k++; print k }' "$work/$batch.csv")
  echo "$peak $once"
}

measure() {
  local label=$1 bin=$2 over=0 r peak once
  for r in $(seq "$runs"); do
    read -r peak once < <(one_run "$bin" "$label$r")
    printf '%s run %d: provider peak in flight %d (cap %d), rows ended once %d of %d\n' "$label" "$r" "$peak" "$cap" "$once" "$rows"
    ((peak > cap)) && over=$((over + 1))
  done
  printf '%s: %d of %d over cap\n' "$label" "$over" "$runs"
}

measure after "$work/hfsent"
[[ -n ${BASE_BIN:-} ]] && measure before "$work/hfsent-base"
exit 0
