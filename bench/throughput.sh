#!/usr/bin/env bash
# Achieved against ideal throughput: ROWS rows (default 20000) at -c 64
# against the fake provider with 20 ms latency. The ideal is
# concurrency / latency = 3200 rows/s; the ratio shows what the pipeline
# itself costs.
#   bench/throughput.sh [ROWS] [extra classify flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-20000}; shift || true
conc=${CONC:-64}; latency_ms=${LATENCY_MS:-20}
work=$(mktemp -d)
trap 'kill $fake_pid 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/hfsent" ./cmd/hfsent
go build -o "$work/fakeprovider" ./bench/fakeprovider
awk -v n="$rows" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "r%d,\"review %d: fine\"\n", i, i }' > "$work/in.csv"
"$work/fakeprovider" -latency "${latency_ms}ms" -addr-file "$work/addr" 2>"$work/fake.log" &
fake_pid=$!
for _ in $(seq 100); do [[ -s $work/addr ]] && break; sleep 0.05; done

"$work/hfsent" classify "$work/in.csv" -o "$work/out.csv" --endpoint "http://$(cat "$work/addr")" \
  -c "$conc" --retries 0 --no-progress --summary-json "$work/sum.json" "$@" 2>"$work/err.log" || true
grep -E '^rows=' "$work/err.log" || tail -5 "$work/err.log"
rps=$(sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$work/sum.json")
ideal=$(echo "$conc * 1000 / $latency_ms" | bc -l)
printf 'rows=%d -c %d latency=%dms achieved=%.0f rows/s ideal=%.0f rows/s ratio=%.3f\n' \
  "$rows" "$conc" "$latency_ms" "$rps" "$ideal" "$(echo "$rps / $ideal" | bc -l)"
