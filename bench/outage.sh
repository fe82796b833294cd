#!/usr/bin/env bash
# A short outage with no fallback model (issue 8): the rows wait for the
# breaker, so a short outage costs no rows. Not a test: it prints, per run,
# the rows that did not end success, and the total over RUNS runs.
#
#   bench/outage.sh            # 20 runs
#   RUNS=5 bench/outage.sh
#
# The mix: 400 rows; the fake answers in 20 ms, and 1 s after the first
# call fails every call with 500 for 3 s. hfsent runs with
#   --concurrency 4 --rps 100 --retries 2 --breaker-window 1s
#   --breaker-min-calls 10 --breaker-cooldown 1s
set -euo pipefail
RUNS=${RUNS:-20}
source "$(dirname "$0")/lib.sh"

gen_csv 400 "$work/in.csv" "order arrived on time and works well, number"
lost_total=0
for i in $(seq "$RUNS"); do
  start_fake -latency 20ms -outage-after 1s -outage-for 3s
  rc=0
  "$work/hfsent" classify "$work/in.csv" --endpoint "http://$(fake_addr)/models/{model}" -o "$work/out.csv" \
    --concurrency 4 --rps 100 --retries 2 --breaker-window 1s --breaker-min-calls 10 --breaker-cooldown 1s \
    --no-progress --log-level warn 2>"$work/err.log" || rc=$?
  stop_fake
  lost=$(awk -F, 'NR > 1 && $5 != "success"' "$work/out.csv" | wc -l)
  lost_total=$((lost_total + lost))
  echo "run $i: exit=$rc rows not success=$lost  $(grep -oE 'elapsed=[^ ]+|breaker_openings=[0-9]+|provider_calls=[0-9]+' "$work/err.log" | tr '\n' ' ')"
done
echo "rows lost over $RUNS runs: $lost_total"
