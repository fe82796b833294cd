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
#   0. the fill (issue 31): FILL_ROWS rows (default 300000) at -c 64, the
#      default flags, against the fake provider answering at once: an
#      empty cache against --no-cache, wall and peak RSS, and with
#      BASE_BIN (an earlier build) the same two beside them;
#
#   bench/cache.sh [ROWS] [ROUNDS]        BASE_BIN=/tmp/hfsent-base FILL_ROWS=300000
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-100000}
rounds=${2:-3}

fill_rows=${FILL_ROWS:-300000}
gen_csv "$fill_rows" "$work/fill.csv" "review: fine"
start_fake -latency 0 # answers at once (the issue's case); the default 20 ms capped every fill at 3,200 rows/s
fill() { # NAME BIN ARGS...: wall and peak RSS of one run of the fill rows
  local name=$1 bin=$2
  shift 2
  rm -rf "$work/fillcache"
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" env HF_TOKEN=hf_bench "$bin" classify "$work/fill.csv" -o /dev/null \
    --endpoint "http://$(fake_addr)" -c 64 --no-progress "$@" 2>"$work/$name.log"
  read -r wall user sys rss <"$work/time"
  printf "fill %-13s rows=%d wall=%.1fs cpu=%.1fs peak_rss=%.1fMiB\n" "$name" "$fill_rows" "$wall" "$(echo "$user + $sys" | bc)" "$(echo "$rss / 1024" | bc -l)"
}
for bin in ${BASE_BIN:+"$BASE_BIN"} "$work/hfsent"; do
  tag=this
  [[ $bin == "${BASE_BIN:-}" ]] && tag=base
  fill "$tag-cache" "$bin" --cache-dir "$work/fillcache"
  fill "$tag-no-cache" "$bin" --no-cache
done
stop_fake
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
