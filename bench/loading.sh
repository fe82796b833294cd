#!/usr/bin/env bash
# A model that is loading (issue 8), replaying the router's recorded
# exchange: the first call gets 503 {"estimated_time": 20.0}, and the model
# is up 10 s after the first call; a call that carries X-Wait-For-Model: 1
# is held until then. hfsent should answer at about 10 s, the floor, not
# after sleeping the whole 20 s estimate. Prints the seconds to the answer.
#
#   bench/loading.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

printf 'request_id,text\nr1,"the repair was quick and the staff were friendly"\n' >"$work/in.csv"
start_fake -latency 50ms -loading-for 10s -estimated-time 20
t0=$(date +%s.%N)
"$work/hfsent" classify "$work/in.csv" --endpoint "http://$(fake_addr)/models/{model}" -o "$work/out.csv" \
  --no-progress --log-level warn 2>"$work/err.log" || true
t1=$(date +%s.%N)
stop_fake
outcome=$(awk -F, 'NR == 2 { print $5 }' "$work/out.csv")
printf 'answered after %.1f s (the model was up after 10 s; estimated_time said 20): %s\n' "$(echo "$t1 - $t0" | bc -l)" "$outcome"
