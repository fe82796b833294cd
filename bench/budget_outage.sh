#!/usr/bin/env bash
# A fleet budget through a database outage (docs/guides/budget.md#benchmarks,
# issue 25): three serve replicas and two workers, -c 12 each, under
# `budget set b --cap CAP` (default 12), against the fake provider at
# LATENCY_MS (default 50); they reach PostgreSQL through bench/dbproxy,
# which is cut for CUT seconds (default 4) once the shares have settled.
# While it is cut, bench/loadgen offers RATE requests/s (default 20, open
# loop) to each server: their answers 200 and 503 are printed, then the
# provider's peak calls in flight over the whole run (before, during and
# after the cut).
#   bench/budget_outage.sh                        this tree
#   BIN=/tmp/hfsent-base bench/budget_outage.sh   another build
#   BASE_BIN=/tmp/hfsent-base bench/budget_outage.sh   that build, then this tree
set -euo pipefail
if [[ -n ${BASE_BIN:-} ]]; then
  echo "#### before: $BASE_BIN"
  BIN=$BASE_BIN BASE_BIN= "$0" || echo "  (exit $?)"
  echo "#### after: this tree"
  BASE_BIN= BIN= exec "$0"
fi
[[ -n ${BIN:-} ]] && export HFSENT_BIN=$BIN
cap=${CAP:-12}; latency_ms=${LATENCY_MS:-50}; cut=${CUT:-4}; rate=${RATE:-20}
source "$(dirname "$0")/lib.sh"
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/dbproxy" ./bench/dbproxy
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; bench_cleanup' EXIT
new_db
H=$work/hfsent
export HFSENT_DB=$db
$H budget set b --cap "$cap" 2>/dev/null
gen_csv 200000 "$work/in.csv" review
$H queue push "$work/in.csv" --batch outage --global-cap 1000 --no-progress 2>/dev/null
pg_host=$(echo "$db" | sed -E 's|^postgres://[^@]*@([^/]*)/.*|\1|')
"$work/dbproxy" -target "$pg_host" -addr-file "$work/px" &
px_pid=$!; pids+=($px_pid)
for _ in $(seq 100); do [[ -s $work/px ]] && break; sleep 0.05; done
via=$(echo "$db" | sed -E "s|@[^/]*/|@$(cat "$work/px")/|")
start_fake -latency "${latency_ms}ms"
addrs=()
for i in 1 2 3; do
  $H serve --addr 127.0.0.1:0 --endpoint "http://$(fake_addr)" -c 12 --retries 0 --no-cache --no-dedupe --budget b --db "$via" 2>"$work/s$i.log" &
  pids+=($!)
  for _ in $(seq 200); do grep -q 'msg=listening' "$work/s$i.log" 2>/dev/null && break; sleep 0.05; done
  addrs+=("$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$work/s$i.log")")
done
for i in 1 2; do
  HFSENT_DB=$via $H worker --batch outage --endpoint "http://$(fake_addr)" -c 12 --retries 0 --no-cache --no-dedupe --no-progress --budget b 2>"$work/w$i.log" &
  pids+=($!)
done
# Load before the cut too, so that the servers' shares are their traffic's.
lg=()
for a in "${addrs[@]}"; do "$work/loadgen" -url "http://$a" -rate "$rate" -duration 3s -warmup 0s -name warm >/dev/null & lg+=($!); done
wait "${lg[@]}"
echo "== 3 serve + 2 workers under --cap $cap, provider at ${latency_ms}ms; PostgreSQL cut for ${cut}s; ${rate} requests/s to each server meanwhile"
kill -USR1 "$px_pid"
lg=()
for i in 0 1 2; do
  "$work/loadgen" -url "http://${addrs[$i]}" -rate "$rate" -duration "${cut}s" -warmup 0s -name "serve $((i + 1)) during the cut" >"$work/l$i.txt" &
  lg+=($!)
done
wait "${lg[@]}"
kill -USR2 "$px_pid"
for i in 0 1 2; do
  sed -n '1p;/answers:/p' "$work/l$i.txt" | sed 's/^/  /'
done
sleep 2
for a in "${addrs[@]}"; do
  printf '  after the cut, %s: on_safe_share=%s lease_held=%s\n' "$a" \
    "$(curl -s "http://$a/metrics" | awk '$1 == "hfsent_budget_on_safe_share" { print $2 }')" \
    "$(curl -s "http://$a/metrics" | awk '$1 == "hfsent_budget_lease_held" { print $2 }')"
done
for p in "${pids[@]}"; do [[ $p == "$px_pid" ]] || kill "$p" 2>/dev/null || true; done
sleep 0.5
stop_fake
echo "  provider over the run: $(sed -n 's/.*\(max_in_flight=[0-9]*\) \(mean_in_flight=[0-9.]*\).*/\1 \2/p' "$work/fake.log") (cap $cap)"
# LOGS=DIR keeps the members' logs there.
if [[ -n ${LOGS:-} ]]; then mkdir -p "$LOGS" && cp "$work"/s?.log "$work"/w?.log "$LOGS"/; fi
exit 0
