#!/usr/bin/env bash
# Fleet budgets (hfsent budget, --budget): every figure of
# docs/guides/budget.md#benchmarks, in one sitting, against the fake
# provider at LATENCY_MS (default 20) under --cap CAP (default 12):
#   1. utilisation: three workers -c 12 on one batch, demand above the cap,
#      for SECS (default 10) seconds: the provider's mean calls in flight
#      over the run (goal: at least 0.9 x cap) and the most at once (never
#      above the cap);
#   2. interactive p99: one serve member under RATE requests/s (default
#      200, open loop, bench/loadgen) alone, then with two workers on a
#      batch competing for the same budget (goal: p99 at most 1.2 x alone);
#   3. shares following a step: a worker alone holds the cap; a second
#      worker joins: time until both hold at least cap/2 - 1; the second
#      leaves (SIGTERM): time until the first holds the cap again; a third
#      is killed with -9: the same; a server's traffic doubles beside the
#      worker: time until its share has doubled (less one);
#   4. the database's cost: MEMBERS (default 8) idle serve members for SECS:
#      renewals per second and PostgreSQL CPU per member (against the same
#      time with none).
#   5. contended (issue 25): three serve members, each with 2 clients in a
#      closed loop (bench/loadgen -clients 2), against a provider at
#      CONTENDED_LATENCY_MS (default 50), alone, then with two workers that
#      would take the whole cap: the provider's mean calls in flight/cap
#      with the batch (goal: at least 0.85) and the servers' p99 with the
#      batch against alone (goal: at most 1.2x). With BASE_BIN set (say
#      /tmp/hfsent-base), that build runs it first, then this one: before
#      and after, one after the other.
# The batches are pushed with --global-cap 1000, so that the budget, not
# the batch, is what bounds the workers.
#   bench/budget.sh            (ONLY="2 3" runs those parts alone; BIN=path
#                               runs another build, as HFSENT_BIN does)
#   ONLY=5 BASE_BIN=/tmp/hfsent-base bench/budget.sh
set -euo pipefail
cap=${CAP:-12}; latency_ms=${LATENCY_MS:-20}; secs=${SECS:-10}; rate=${RATE:-200}; members=${MEMBERS:-8}
c_latency_ms=${CONTENDED_LATENCY_MS:-50}
HFSENT_BIN=${HFSENT_BIN:-${BIN:-}}
source "$(dirname "$0")/lib.sh"
go build -o "$work/loadgen" ./bench/loadgen
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; bench_cleanup' EXIT
new_db
H=$work/hfsent
export HFSENT_DB=$db
$H budget set b --cap "$cap" 2>/dev/null
gen_csv 400000 "$work/in.csv" review
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc -l; }
shares() { $H budget status b --json | jq -r '[.members[] | select(.live) | "\(.pid):\(.share)"] | join(" ")'; }
share_of() { $H budget status b --json | jq -r --arg p "$1" '[.members[] | select(.pid == ($p | tonumber)) | .share] | first // -1'; }
start_worker() { # start_worker BATCH LOG [flags]
  local batch=$1 log=$2; shift 2
  $H worker --batch "$batch" --endpoint "http://$(fake_addr)" -c 12 --retries 0 --no-dedupe --no-progress --budget b "$@" 2>"$log" &
  pids+=($!)
  last_pid=$!
}
start_serve() { # start_serve LOG [flags]
  local log=$1; shift
  : >"$log" # emptied here: the child's own redirect may come after the wait below reads it
  $H serve --addr 127.0.0.1:0 --endpoint "http://$(fake_addr)" -c 12 --retries 0 --no-dedupe --budget b --db "$db" "$@" 2>"$log" &
  pids+=($!)
  last_pid=$!
  for _ in $(seq 400); do grep -q 'msg=listening' "$log" 2>/dev/null && break; sleep 0.05; done
  last_addr=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$log")
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
# waitfor COND: until the shell condition holds, at most 30s.
waitfor() {
  local t=$(now)
  until eval "$1"; do
    if (( $(echo "$(elapsed "$t") > 30" | bc) )); then echo "  gave up after 30s waiting for: $1 ($(shares))"; return 1; fi
    sleep 0.02
  done
}
phase() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }
fake_line() { sed -n 's/.*\(max_in_flight=[0-9]*\) \(mean_in_flight=[0-9.]*\).*/\1 \2/p' "$work/fake.log"; }

if phase 1; then
echo "== 1. utilisation: 3 workers -c 12 under --cap $cap, ${secs}s, provider at ${latency_ms}ms"
$H queue push "$work/in.csv" --batch util --global-cap 1000 --no-progress 2>/dev/null
start_fake -latency "${latency_ms}ms"
for i in 1 2 3; do start_worker util "$work/u$i.log"; done
sleep "$secs"
stop_all
stop_fake
read -r max mean < <(fake_line | tr -d 'a-z_=' | tr -s ' ')
printf '  provider: most calls at once %s (cap %d), mean in flight %s = %.2f x cap\n' "$max" "$cap" "$mean" "$(echo "$mean / $cap" | bc -l)"
fi

if phase 2; then
echo "== 2. interactive p99: serve at ${rate}/s alone, then with 2 workers competing (--cap $cap)"
start_fake -latency "${latency_ms}ms"
start_serve "$work/s.log" --no-cache # loadgen repeats its texts from one run to the next
spid=$last_pid; saddr=$last_addr
"$work/loadgen" -url "http://$saddr" -rate "$rate" -duration "${secs}s" -name "serve alone" | sed 's/^/  /' | tee "$work/alone.txt"
$H queue push "$work/in.csv" --batch nightly --global-cap 1000 --no-progress 2>/dev/null
start_worker nightly "$work/n1.log"; start_worker nightly "$work/n2.log"
sleep 2
"$work/loadgen" -url "http://$saddr" -rate "$rate" -duration "${secs}s" -name "serve with 2 workers" | sed 's/^/  /' | tee "$work/with.txt"
echo "  shares at the end (pid:share): $(shares)"
stop_all
stop_fake
p99() { sed -n 's/.*latency answered:.*p99 \([0-9.]*\)\(ms\|µs\|s\).*/\1 \2/p' "$1" | awk '{ v = $1; if ($2 == "s") v *= 1000; if ($2 == "µs") v /= 1000; print v }'; }
a=$(p99 "$work/alone.txt"); w=$(p99 "$work/with.txt")
printf '  p99 alone %.1fms, with a batch competing %.1fms: %.2fx\n' "$a" "$w" "$(echo "$w / $a" | bc -l)"
echo "  provider: $(fake_line)"
fi

if phase 3; then
echo "== 3. shares following a step (--cap $cap, renewals every 250ms)"
start_fake -latency "${latency_ms}ms"
$H queue push "$work/in.csv" --batch step --global-cap 1000 --no-progress 2>/dev/null
start_worker step "$work/st1.log"; first=$last_pid
waitfor '[[ $(share_of "$first") -ge $cap ]]'
t0=$(now)
start_worker step "$work/st2.log"; second=$last_pid
half=$((cap / 2 - 1))
waitfor '[[ $(share_of "$first") -le $((cap - half)) && $(share_of "$second") -ge $half ]]'
printf '  a second worker joins: both hold >= %d after %.2fs (%s)\n' "$half" "$(elapsed "$t0")" "$(shares)"
t0=$(now)
kill -TERM "$second"; wait "$second" 2>/dev/null || true
waitfor '[[ $(share_of "$first") -ge $cap ]]'
printf '  it leaves (SIGTERM): the first holds %d again after %.2fs\n' "$cap" "$(elapsed "$t0")"
# With a safe share the budget keeps the killed member's safe share for its
# safe window too (docs/guides/budget.md#limits): measured without one, as
# before safe shares, where the build has them.
no_safe=()
$H worker --help 2>&1 | grep -q -- --budget-safe-for && no_safe=(--budget-safe-for 0)
start_worker step "$work/st3.log" "${no_safe[@]}"; third=$last_pid
waitfor '[[ $(share_of "$third") -ge $half ]]'
t0=$(now)
kill -KILL "$third"; wait "$third" 2>/dev/null || true
waitfor '[[ $(share_of "$first") -ge $cap ]]'
printf '  one killed with -9 (--timeout 12s): the first holds %d again after %.2fs (lease 1s + attempt timeout 12s + 1s grace; %s)\n' "$cap" "$(elapsed "$t0")" "${no_safe[*]:-no safe share in this build}"
start_serve "$work/step-serve.log"; spid=$last_pid; saddr=$last_addr
"$work/loadgen" -url "http://$saddr" -rate 150 -warmup 0s -duration 4s -name step >/dev/null &
lg=$!
sleep 3
before=$(share_of "$spid")
wait "$lg"
"$work/loadgen" -url "http://$saddr" -rate 300 -warmup 0s -duration 6s -name step2 >/dev/null &
lg=$!
t0=$(now)
target=$((before * 2 - 1))
if waitfor '[[ $(share_of "$spid") -ge $target ]]'; then
  printf '  a server'"'"'s traffic doubles (150/s to 300/s) beside the worker: its share goes from %d to %d in %.2fs (%s)\n' "$before" "$(share_of "$spid")" "$(elapsed "$t0")" "$(shares)"
fi
wait "$lg" || true
stop_all
stop_fake
fi

if phase 4; then
echo "== 4. the database's cost: $members idle serve members for ${secs}s"
start_fake -latency "${latency_ms}ms"
c0=$(pg_cpu_ticks); sleep "$secs"; c1=$(pg_cpu_ticks)
for i in $(seq "$members"); do start_serve "$work/m$i.log"; done
sleep 1
r0=$(psql "$db" -Atc "select coalesce(sum(renewals),0) from hfsent.budget_member"); c2=$(pg_cpu_ticks); t0=$(now)
sleep "$secs"
r1=$(psql "$db" -Atc "select coalesce(sum(renewals),0) from hfsent.budget_member"); c3=$(pg_cpu_ticks); dt=$(elapsed "$t0")
stop_all
stop_fake
if [[ -n $c0 ]]; then
  hz=$(getconf CLK_TCK)
  idle=$(echo "($c1 - $c0) / $hz / $secs" | bc -l)
  busy=$(echo "($c3 - $c2) / $hz / $dt" | bc -l)
  printf '  renewals: %.1f/s in all, %.2f/s per member\n' "$(echo "($r1 - $r0) / $dt" | bc -l)" "$(echo "($r1 - $r0) / $dt / $members" | bc -l)"
  printf '  PostgreSQL CPU: %.2f%% of a core idle, %.2f%% with %d members: %.3f%% of a core per member, %.3f ms CPU per renewal\n' \
    "$(echo "$idle * 100" | bc -l)" "$(echo "$busy * 100" | bc -l)" "$members" "$(echo "($busy - $idle) * 100 / $members" | bc -l)" \
    "$(echo "($busy - $idle) * 1000 / (($r1 - $r0) / $dt)" | bc -l)"
else
  printf '  renewals: %.1f/s in all (PostgreSQL is not on this machine: no CPU figure)\n' "$(echo "($r1 - $r0) / $dt" | bc -l)"
fi
fi

# contended BIN LABEL: phase 5 with that build of hfsent.
contended() {
  local H=$1 label=$2 saddrs=() i
  $H budget drop b --yes 2>/dev/null || true
  $H budget set b --cap "$cap" 2>/dev/null
  start_fake -latency "${c_latency_ms}ms"
  for i in 1 2 3; do
    start_serve "$work/c-s$i.log" --no-cache
    [[ -n $last_addr ]] || { echo "  serve did not start:"; cat "$work/c-s$i.log"; return 1; }
    saddrs+=("$last_addr")
  done
  # load NAME WARMUP: 2 closed-loop clients on each server for SECS, at once.
  load() {
    local j lg=()
    for j in 0 1 2; do
      "$work/loadgen" -url "http://${saddrs[$j]}" -clients 2 -warmup "$2" -duration "${secs}s" -name "$1 $j" >"$work/c-$1-$j.txt" &
      lg+=($!)
    done
    wait "${lg[@]}"
  }
  mark() { kill -USR1 "$fake_pid"; sleep 0.1; sed -n 's/.*mark busy_ns=\([0-9]*\) now_ns=\([0-9]*\).*/\1 \2/p' "$work/fake.log" | tail -1; }
  p99s() { for j in 0 1 2; do p99 "$work/c-$1-$j.txt"; done | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
  read -r b0 t0 < <(mark); load alone 1s; read -r b1 t1 < <(mark)
  local batch="contended$RANDOM"
  $H queue push "$work/in.csv" --batch "$batch" --global-cap 1000 --no-progress 2>/dev/null
  start_worker "$batch" "$work/c-w1.log"; start_worker "$batch" "$work/c-w2.log"
  sleep 2
  read -r b2 t2 < <(mark); load with 0s; read -r b3 t3 < <(mark)
  local sh; sh=$(shares)
  stop_all
  local most; most=$(sed -n 's/.*mark .*max_in_flight=\([0-9]*\).*/\1/p' "$work/fake.log" | tail -1)
  stop_fake
  local ma mw a w
  ma=$(echo "($b1 - $b0) / ($t1 - $t0)" | bc -l); mw=$(echo "($b3 - $b2) / ($t3 - $t2)" | bc -l)
  a=$(p99s alone); w=$(p99s with)
  printf '  %s: in flight alone %.2f; with the batch %.2f = %.2f x cap (most at once %s); servers p99 (mean of 3) alone %sms, with the batch %sms: %.2fx; shares at the end %s\n' \
    "$label" "$ma" "$mw" "$(echo "$mw / $cap" | bc -l)" "$most" "$a" "$w" "$(echo "$w / $a" | bc -l)" "$sh"
}

if phase 5; then
echo "== 5. contended: 3 servers x 2 closed-loop clients, then 2 workers competing (--cap $cap, provider at ${c_latency_ms}ms, ${secs}s each)"
p99() { sed -n 's/.*latency answered:.*p99 \([0-9.]*\)\(ms\|µs\|s\).*/\1 \2/p' "$1" | awk '{ v = $1; if ($2 == "s") v *= 1000; if ($2 == "µs") v /= 1000; print v }'; }
if [[ -n ${BASE_BIN:-} ]]; then
  cp "$BASE_BIN" "$work/hfsent-base"
  contended "$work/hfsent-base" "before ($BASE_BIN)"
fi
contended "$work/hfsent" "after (${HFSENT_BIN:-this tree})"
fi
