#!/usr/bin/env bash
# Peak memory and speed of one big run: the real binary classifies ROWS
# generated rows (default 1,000,000) at -c 64 against the fake provider with
# no latency, under /usr/bin/time -v. Prints peak RSS and rows/s.
#   bench/rss.sh [ROWS] [extra classify flags...]
set -euo pipefail
rows=${1:-1000000}; shift || true
[[ -x /usr/bin/time ]] || { echo "needs GNU time: apt-get install -y time" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"

gen_csv "$rows" "$work/in.csv" "review: the delivery was quick and the product works well, number"
start_fake -latency "${LATENCY:-0s}"

/usr/bin/time -v "$work/hfsent" classify "$work/in.csv" -o "$work/out.csv" \
  --endpoint "http://$(fake_addr)" -c "${CONC:-64}" --retries 0 --no-progress \
  --summary-json "$work/sum.json" "$@" 2>"$work/time.log" || true
grep -E '^rows=' "$work/time.log" || tail -5 "$work/time.log"
rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time.log")
rps=$(sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$work/sum.json")
lines=$(($(wc -l < "$work/out.csv") - 1))
printf 'rows=%d written=%d peak_rss=%.1f MiB rows/s=%.0f\n' "$rows" "$lines" "$(echo "$rss_kb/1024" | bc -l)" "$rps"
