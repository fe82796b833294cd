#!/usr/bin/env bash
# Benchmarks for the resilience layers (issue 3), run against the fake
# provider on loopback. Not a test: it prints figures, it asserts nothing.
#
#   bench/storm.sh            # all scenarios, RUNS (3) times each
#   ROWS=340 RUNS=5 bench/storm.sh
#
# Prints, for the storm (340 rows, a provider that allows 8 calls at once
# and fails 3% with 503, 100 ms a call, hfsent -c 32 --adaptive): wall time
# against the ideal 340 x 0.1 s / 8, and the share of calls answered 429;
# then, for -c 64 against a 20 ms provider with no limit, achieved against
# ideal throughput (64 / 0.02 s = 3200 rows/s). Each storm runs RUNS times:
# the machine is shared and noisy, so the median ratio is the figure.
set -euo pipefail
ROWS=${ROWS:-340}
RUNS=${RUNS:-3}
FAST_ROWS=${FAST_ROWS:-6400}
command -v jq >/dev/null || { echo "needs jq: apt-get install -y jq" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"

gen_csv "$ROWS" "$work/storm.csv" "order arrived on time and works well, number"
gen_csv "$FAST_ROWS" "$work/fast.csv" "order arrived on time and works well, number"

# run NAME INPUT FAKE-FLAGS -- HFSENT-FLAGS
run() {
  local name=$1 input=$2; shift 2
  local fake=() ; while [[ $1 != -- ]]; do fake+=("$1"); shift; done; shift
  start_fake "${fake[@]}"
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "$work/hfsent" classify "$input" --endpoint "http://$(fake_addr)/models/{model}" \
    -o "$work/$name.csv" --summary-json "$work/$name.json" --no-progress --log-level warn "$@" 2>"$work/$name.err" || rc=$?
  t1=$(date +%s.%N)
  stop_fake
  echo "$t1 - $t0" | bc -l >"$work/$name.wall"
  echo "  exit=$rc  $(tail -1 "$work/$name.err")"
  echo "  fake: $(tail -1 "$work/fake.log")"
}

storm() { # storm NAME FAKE-FLAGS...
  local title=$1; shift
  echo "== $title"
  echo "   $ROWS rows, capacity 8, 3% 503, 100 ms; hfsent -c 32 --adaptive; $RUNS runs"
  local ideal ratios=()
  ideal=$(echo "$ROWS * 0.1 / 8" | bc -l)
  for _ in $(seq "$RUNS"); do
    local name=storm$((++storms))
    run "$name" "$work/storm.csv" -latency 100ms -capacity 8 -fail 0.03 "$@" -- -c 32 --adaptive >/dev/null
    local wall
    wall=$(cat "$work/$name.wall")
    ratios+=("$(echo "$wall / $ideal" | bc -l)")
    jq -r --arg wall "$wall" --arg ideal "$ideal" '
      "  wall \($wall | tonumber * 100 | round / 100) s vs ideal \($ideal | tonumber * 100 | round / 100) s (x\(($wall | tonumber) / ($ideal | tonumber) * 100 | round / 100))" +
      "; success \(.outcomes.success)/\(.rows)" +
      "; 429s \(.resilience.rate_limited_429s) of \(.resilience.provider_calls) calls = \(.resilience.rate_limited_429s / .resilience.provider_calls * 1000 | round / 10)%" +
      "; final limit \(.resilience.adaptive_limit)"' "$work/$name.json"
  done
  printf '  median x%.2f\n' "$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')"
}

storms=0 fasts=0
storm "429 after 100 ms, no Retry-After" -retry-after ""
storm "429 at once, no Retry-After" -retry-after "" -reject-fast
storm "429 after 100 ms, Retry-After: 1" -retry-after 1
storm "429 at once, Retry-After: 1" -retry-after 1 -reject-fast

fast() { # fast NAME HFSENT-FLAGS...
  local name=fast$((++fasts)); echo "== $1"; shift
  echo "   $FAST_ROWS rows, 20 ms, no limit; hfsent -c 64 $*"
  run "$name" "$work/fast.csv" -latency 20ms -- -c 64 "$@"
  local wall
  wall=$(cat "$work/$name.wall")
  jq -r --arg wall "$wall" '
    (.rows / ($wall | tonumber)) as $rps |
    "  wall \($wall | tonumber * 100 | round / 100) s; \($rps | round) rows/s vs ideal 3200 = \($rps / 3200 * 1000 | round / 10)%; max in flight \(.resilience.max_in_flight)"' "$work/$name.json"
}
fast "fixed"
fast "adaptive" --adaptive
