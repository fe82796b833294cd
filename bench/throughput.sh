#!/usr/bin/env bash
# Achieved against ideal throughput: ROWS rows (default 20000) at -c 64
# (CONC) against the fake provider with 20 ms latency. The ideal is
# concurrency / latency = 3200 rows/s; the ratio shows what the pipeline
# itself costs. In the same sitting, bench/peerclient (the plainest Go
# client of the same API, no CSV and no resilience) sends the same number of
# calls at the same concurrency: hfsent/peer separates what hfsent costs
# from what the machine and net/http cost (on 2 shared cores, the fake's own
# CPU holds even the peer below the ideal).
#   bench/throughput.sh [ROWS] [extra classify flags...]
set -euo pipefail
rows=${1:-20000}; shift || true
conc=${CONC:-64}; latency_ms=${LATENCY_MS:-20}
source "$(dirname "$0")/lib.sh"

gen_csv "$rows" "$work/in.csv" "review: fine"
go build -o "$work/peerclient" ./bench/peerclient
start_fake -latency "${latency_ms}ms"

peer=$("$work/peerclient" -url "http://$(fake_addr)" -rows "$rows" -c "$conc")
peer_rps=${peer##*rows/s=}

"$work/hfsent" classify "$work/in.csv" -o "$work/out.csv" --endpoint "http://$(fake_addr)" \
  -c "$conc" --retries 0 --no-progress --summary-json "$work/sum.json" "$@" 2>"$work/err.log" || true
grep -E '^rows=' "$work/err.log" || tail -5 "$work/err.log"
rps=$(sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$work/sum.json")
ideal=$(echo "$conc * 1000 / $latency_ms" | bc -l)
printf 'rows=%d -c %d latency=%dms achieved=%.0f rows/s ideal=%.0f rows/s ratio=%.3f\n' \
  "$rows" "$conc" "$latency_ms" "$rps" "$ideal" "$(echo "$rps / $ideal" | bc -l)"
printf 'peer (bench/peerclient, same calls, same -c): %.0f rows/s = %.3f of ideal; hfsent/peer=%.3f\n' \
  "$peer_rps" "$(echo "$peer_rps / $ideal" | bc -l)" "$(echo "$rps / $peer_rps" | bc -l)"
