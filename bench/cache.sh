#!/usr/bin/env bash
# The response cache's figures (docs/guides/cost.md#figures).
#
#   1. a second run of ROWS rows, all hits, against --provider local on the
#      same rows, side by side, ROUNDS times in turn: rows/s, CPU seconds
#      and peak RSS of each (the first run, through the fake chat server
#      at -c 64, fills the cache);
#   2. the cache file's size for those rows, and per million entries
#      (internal/cache's BenchmarkFileSize, 1000000 entries);
#   3. a hit against a call in the engine, per row: time and allocations
#      (internal/engine's BenchmarkRow; the call goes to a chat fake on
#      loopback with no latency, the least a call can cost).
#
#   bench/cache.sh [ROWS] [ROUNDS]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-100000}
rounds=${2:-3}
awk -v n="$rows" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "r%d,\"the service was good and quick %d\"\n", i, i }' >"$work/in.csv"
start_fake -chat -latency 2ms
chat=(--provider chat --model bench/chat --labels positive,negative --endpoint "http://$(fake_addr)/v1/chat/completions" --cache-dir "$work/cache" --no-progress)
HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o /dev/null -c 64 "${chat[@]}" 2>"$work/fill.log"
echo "filled: $(grep -o 'rows=[0-9]* success=[0-9]*' "$work/fill.log") ($(grep -o 'elapsed=[^ ]*' "$work/fill.log"))"

measure() { # NAME ARGS...: rows/s, CPU, peak RSS of one run
  local name=$1
  shift
  /usr/bin/time -f "%U %S %M" -o "$work/time" env HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o /dev/null "$@" 2>"$work/$name.log"
  read -r user sys rss <"$work/time"
  printf "%-6s %-22s cpu=%.2fs peak_rss=%.1fMiB %s\n" "$name" "$(grep -o 'rows/s=[0-9.]*' "$work/$name.log")" \
    "$(echo "$user + $sys" | bc)" "$(echo "$rss / 1024" | bc -l)" "$(grep -o 'cache_hits=[0-9]* calls=[0-9]*' "$work/$name.log" || true)"
}
for i in $(seq "$rounds"); do
  measure hits "${chat[@]}"
  measure local --provider local
done
stop_fake
size=$(stat -c %s "$work/cache/responses.sqlite")
echo "cache file for $rows entries: $size bytes ($(echo "$size / $rows" | bc) bytes/entry)"
go test -run XXX -bench BenchmarkFileSize -benchtime 1000000x ./internal/cache/ | grep Benchmark
go test -run XXX -bench BenchmarkRow -benchtime 20000x ./internal/engine/ | grep Benchmark
