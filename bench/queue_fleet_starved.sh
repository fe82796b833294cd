#!/usr/bin/env bash
# A fleet's batch always finishes (issue 31, item 4), RUNS times (default
# 30): two workers of -c 8 with --exit-when-done and --lease LEASE (2s) on
# ROWS rows (1,500) under --global-cap CAP (12), at LATENCY_MS (50), reaching
# PostgreSQL through bench/dbproxy, with the faults of the fleet check under
# CPU starvation: both workers pinned to one CPU beside BUSY busy loops
# (default 2) on it; worker 2 stopped (SIGSTOP) at 1 s for STOP_FOR (3 s,
# past its lease), then continued; the database cut for CUT (4 s) at 2 s.
# With BUDGET=1 the workers and a serve replica share `budget set b --cap
# CAP`, and the replica is killed (-9) at 0.5 s, holding its share.
# The times count from when both workers have started. Each run must end,
# both workers exiting by themselves within LIMIT seconds (default 120) of
# that, with every row done once. Prints one line a run,
# then "N of RUNS finished".
#   bench/queue_fleet_starved.sh
#   BIN=/tmp/hfsent-base RUNS=5 bench/queue_fleet_starved.sh   another build
set -euo pipefail
runs=${RUNS:-30}; rows=${ROWS:-1500}; cap=${CAP:-12}; lease=${LEASE:-2s}; latency_ms=${LATENCY_MS:-50}
stop_for=${STOP_FOR:-3}; cut=${CUT:-4}; busy=${BUSY:-2}; limit=${LIMIT:-120}
[[ -n ${BIN:-} ]] && export HFSENT_BIN=$BIN
source "$(dirname "$0")/lib.sh"
go build -o "$work/dbproxy" ./bench/dbproxy
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; bench_cleanup; }
trap cleanup EXIT
new_db
gen_csv "$rows" "$work/in.csv" review
pg_host=$(echo "$db" | sed -E 's|^postgres://[^@]*@([^/]*)/.*|\1|')
"$work/dbproxy" -target "$pg_host" -addr-file "$work/px" 2>/dev/null &
px_pid=$!; pids+=($px_pid)
for _ in $(seq 100); do [[ -s $work/px ]] && break; sleep 0.05; done
via=$(echo "$db" | sed -E "s|@[^/]*/|@$(cat "$work/px")/|")
start_fake -latency "${latency_ms}ms"
budget=()
if [[ -n ${BUDGET:-} ]]; then
  "$work/hfsent" budget set b --cap "$cap" --db "$db" 2>/dev/null
  budget=(--budget b)
fi
cpu=$(( $(nproc) - 1 ))

at() { local d; d=$(echo "$start + $1 - $(date +%s.%N)" | bc -l); [[ $d == -* ]] || sleep "$d"; }

# one_run BATCH: prints whether the workers ended, and the rows done once.
one_run() {
  local batch=$1 w=() b=() i ended=yes srv=
  "$work/hfsent" queue push "$work/in.csv" --db "$db" --batch "$batch" --global-cap "$cap" --lease "$lease" --no-progress 2>/dev/null
  for i in $(seq "$busy"); do taskset -c "$cpu" sh -c 'while :; do :; done' & b+=($!); done
  if [[ -n ${BUDGET:-} ]]; then
    "$work/hfsent" serve --addr 127.0.0.1:0 --endpoint "http://$(fake_addr)" -c 12 --retries 0 --no-cache --no-dedupe \
      "${budget[@]}" --db "$via" 2>"$work/$batch.s.log" &
    srv=$!; pids+=($srv)
  fi
  start=$(date +%s.%N)
  for i in 1 2; do
    taskset -c "$cpu" "$work/hfsent" worker --db "$via" --batch "$batch" --endpoint "http://$(fake_addr)" -c 8 --no-dedupe --no-cache \
      --exit-when-done --no-progress --log-level info "${budget[@]}" 2>"$work/$batch.w$i.log" &
    w+=($!)
  done
  pids+=("${w[@]}" "${b[@]}")
  # The faults' times count from when both workers are in (starved, they
  # take a while to start; a worker that cannot reach the database at its
  # start exits, by design).
  for _ in $(seq 300); do
    grep -q 'msg="worker started"' "$work/$batch.w1.log" 2>/dev/null && grep -q 'msg="worker started"' "$work/$batch.w2.log" 2>/dev/null && break
    sleep 0.1
  done
  start=$(date +%s.%N)
  if [[ -n $srv ]]; then at 0.5; kill -9 "$srv"; fi
  at 1; kill -STOP "${w[1]}"
  at 2; kill -USR1 "$px_pid"
  at "$((1 + stop_for))"; kill -CONT "${w[1]}"
  at "$((2 + cut))"; kill -USR2 "$px_pid"
  for i in 0 1; do
    while kill -0 "${w[$i]}" 2>/dev/null; do
      if (($(echo "$(date +%s.%N) - $start > $limit" | bc -l))); then ended=no; break 2; fi
      sleep 0.2
    done
  done
  kill -9 "${w[@]}" "${b[@]}" 2>/dev/null || true
  wait "${w[@]}" "${b[@]}" 2>/dev/null || true
  "$work/hfsent" queue export --db "$db" --batch "$batch" -o "$work/$batch.csv" 2>/dev/null || true
  local once
  once=$(awk -F, 'NR > 1 && /,success,/ { n[$1]++ } END { k = 0; for (id in n) if (n[id] == 1) k++; print k }' "$work/$batch.csv")
  echo "$ended $once $(echo "$(date +%s.%N) - $start" | bc -l)"
}

ok=0
for r in $(seq "$runs"); do
  read -r ended once took < <(one_run "run$r")
  printf 'run %d: workers ended by themselves: %s, rows done once %d of %d, %.1f s\n' "$r" "$ended" "$once" "$rows" "$took"
  if [[ $ended == yes && $once == "$rows" ]]; then ok=$((ok + 1)); elif [[ -n ${LOGS:-} ]]; then mkdir -p "$LOGS" && cp "$work"/run$r.* "$LOGS"/; fi
done
printf '%d of %d finished\n' "$ok" "$runs"
