#!/usr/bin/env bash
# A bad day at the provider (issue 8), against the fake provider on loopback.
# Not a test: it prints figures and the outcome counts next to the expected.
#
#   bench/badday.sh                 # both runs: -c 6, and -c 16 --adaptive
#   RUNS="fixed" bench/badday.sh    # one of them
#   EARLY=1 bench/badday.sh         # the poison rows all near the start
#
# The mix: 613 rows; the provider allows 6 calls at once (429 beyond, with
# Retry-After: $RETRY_AFTER), answers in 60 ms and fails 5% of calls at random
# with 503; 13 poison rows spread through the file: 6 texts that are never
# answered (each attempt times out after --timeout 1s), 3 always answered 500,
# 4 always answered 400.
#
# Ideal time counts only the slot-seconds the work needs at the provider's 6
# slots: every good call (60 ms, plus the 5% that must be sent again), and
# five attempts of each poison row, as the issue counts them.
set -euo pipefail
RETRY_AFTER=${RETRY_AFTER-1}
RUNS=${RUNS:-"fixed adaptive"}
EARLY=${EARLY:-0}     # 1: the poison rows all come in the first 50 rows
LIMIT=${LIMIT:-300}   # seconds before a run is cut off
command -v jq >/dev/null || { echo "needs jq: apt-get install -y jq" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"

awk -v early="$EARLY" 'BEGIN {
  print "request_id,text"
  kinds[0] = "#timeout#"; kinds[1] = "#500#"; kinds[2] = "#400#"
  # 13 poison rows: 6 timeouts, 3 500s, 4 400s, interleaved; one every 47
  # rows from row 20, or (EARLY=1) one every 4 rows from row 2, where they
  # weigh most on the breaker and the adaptive limit.
  order = "0120120120200"
  first = early ? 2 : 20; step = early ? 4 : 47
  p = 0
  for (i = 0; i < 613; i++) {
    text = "order " i " arrived on time and works well"
    if (i >= first && (i - first) % step == 0 && p < 13) {
      text = "poison " kinds[substr(order, p + 1, 1)] " text " i
      p++
    }
    printf "r%d,\"%s\"\n", i, text
  }
}' >"$work/mixed.csv"

ideal=$(echo "(600 * 0.06 / 0.95 + 6 * 5 * 1 + 3 * 5 * 0.06 + 4 * 5 * 0.06) / 6" | bc -l)

one() { # one NAME HFSENT-FLAGS...
  local name=$1; shift
  start_fake -latency 60ms -capacity 6 -fail 0.05 -retry-after "$RETRY_AFTER"
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout "$LIMIT" "$work/hfsent" classify "$work/mixed.csv" --endpoint "http://$(fake_addr)/models/{model}" \
    -o "$work/$name.csv" --summary-json "$work/$name.json" --no-progress --log-level warn \
    --timeout 1s "$@" 2>"$work/$name.err" || rc=$?
  t1=$(date +%s.%N)
  stop_fake
  local wall; wall=$(echo "$t1 - $t0" | bc -l)
  echo "== $name: hfsent classify mixed.csv --timeout 1s $*"
  echo "  exit=$rc  $(grep -E '^rows=' "$work/$name.err" || tail -2 "$work/$name.err")"
  echo "  fake: $(tail -1 "$work/fake.log")"
  grep -i breaker "$work/$name.err" | head -5 | sed 's/^/  log: /' || true
  if [[ -s $work/$name.json ]]; then
    jq -r --arg wall "$wall" --arg ideal "$ideal" '
      "  wall \($wall | tonumber * 100 | round / 100) s vs ideal \($ideal | tonumber * 100 | round / 100) s: ratio \(($wall | tonumber) / ($ideal | tonumber) * 100 | round / 100)" +
      "\n  outcomes: success=\(.outcomes.success) upstream_timeout=\(.outcomes.upstream_timeout) upstream_failed=\(.outcomes.upstream_failed) upstream_request_rejected=\(.outcomes.upstream_request_rejected) other=\(.rows - .outcomes.success - .outcomes.upstream_timeout - .outcomes.upstream_failed - .outcomes.upstream_request_rejected)" +
      " (expected 600 / 6 / 3 / 4 / 0)" +
      "\n  429s \(.resilience.rate_limited_429s) of \(.resilience.provider_calls) calls; breaker openings \(.resilience.breaker_openings); final adaptive limit \(.resilience.adaptive_limit // "-")"' "$work/$name.json"
  else
    echo "  cut off after ${LIMIT}s: $(($(wc -l <"$work/$name.csv") - 1)) of 613 rows written"
  fi
}

for r in $RUNS; do
  case $r in
    fixed) one fixed -c 6 ;;
    adaptive) one adaptive -c 16 --adaptive ;;
  esac
done
