#!/usr/bin/env bash
# classify --batch-api's figures (docs/guides/batch-api.md#figures), against
# bench/fakeprovider -batch (fakehf.Batch): for ROWS rows and for SMALL rows
#   - the calls hfsent made (uploads, creates, polls, downloads), as the fake
#     counted them;
#   - hfsent's peak RSS (/usr/bin/time -v): at most 150 MiB, and not growing
#     with the rows (SMALL against ROWS);
#   - hfsent's wall time over the fake's processing time (first batch
#     created to last ended, -batch-step-time STEP per step, 3 steps);
# then the cost of the same ROWS rows live (bench/fakeprovider -chat) and by
# batch, from hfsent's own summary (cost_usd) at --price-in/--price-out
# PRICE_IN/PRICE_OUT and --batch-discount DISCOUNT.
#
#   bench/batch_api.sh [ROWS] [SMALL]
#   env: STEP (2s) POLL (1s) PRICE_IN (0.15) PRICE_OUT (0.6) DISCOUNT (0.5) LIVE (1: also the live run)
#   HFSENT_BIN: another build of hfsent (lib.sh)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-50000}
small=${2:-10000}
step=${STEP:-2s}
poll=${POLL:-1s}
price=(--price-in "${PRICE_IN:-0.15}" --price-out "${PRICE_OUT:-0.6}")

chat_args() { # URL
  echo --provider chat --model bench/chat --labels positive,negative --endpoint "$1/v1/chat/completions" \
    --token-env BENCH_KEY --no-cache --no-progress
}

batch_run() { # N
  local n=$1
  gen_csv "$n" "$work/in$n.csv" "the service was good and quick"
  start_fake -batch -batch-step-time "$step"
  local url="http://$(fake_addr)"
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  BENCH_KEY=sk-bench /usr/bin/time -v -o "$work/time$n" "$work/hfsent" classify "$work/in$n.csv" -o "$work/out$n.csv" \
    $(chat_args "$url") "${price[@]}" --batch-discount "${DISCOUNT:-0.5}" --batch-api --batch-poll "$poll" 2>"$work/batch$n.log" || {
    echo "hfsent failed:"; tail -5 "$work/batch$n.log"; exit 1; }
  t1=$(date +%s.%N)
  stop_fake
  local fake rss proc wall
  fake=$(grep -o 'fakeprovider: batch .*' "$work/fake.log")
  rss=$(awk '/Maximum resident set size/ { print $NF }' "$work/time$n")
  proc=$(grep -o 'processing_ms=[0-9]*' <<<"$fake" | cut -d= -f2)
  wall=$(echo "$t1 - $t0" | bc -l)
  echo "rows=$n: $(grep -o 'uploads=[0-9]* creates=[0-9]* polls=[0-9]* downloads=[0-9]*' <<<"$fake") lines=$(grep -o ' lines=[0-9]*' <<<"$fake" | cut -d= -f2)"
  printf "  peak_rss=%.1fMiB wall=%.2fs fake_processing=%.2fs wall/processing=%.3f\n" "$(echo "$rss / 1024" | bc -l)" "$wall" \
    "$(echo "$proc / 1000" | bc -l)" "$(echo "$wall * 1000 / $proc" | bc -l)"
  echo "  $(grep -o '^rows=[0-9]* success=[0-9]*' "$work/batch$n.log") $(grep -o 'cost_usd=[0-9.]*' "$work/batch$n.log" | head -1)"
  echo "  $(grep '^batches:' "$work/batch$n.log")"
  grep -o 'cost_usd=[0-9.]*' "$work/batch$n.log" | head -1 | cut -d= -f2 >"$work/batchcost$n"
}

batch_run "$small"
batch_run "$rows"

if [[ ${LIVE:-1} == 1 ]]; then
  start_fake -chat
  # shellcheck disable=SC2046
  BENCH_KEY=sk-bench "$work/hfsent" classify "$work/in$rows.csv" -o /dev/null $(chat_args "http://$(fake_addr)") "${price[@]}" -c 32 2>"$work/live.log"
  stop_fake
  live=$(grep -o 'cost_usd=[0-9.]*' "$work/live.log" | head -1 | cut -d= -f2)
  batch=$(cat "$work/batchcost$rows")
  echo "cost of $rows rows at --price-in ${PRICE_IN:-0.15} --price-out ${PRICE_OUT:-0.6}: live=$live USD ($(grep -o '^rows=[0-9]* success=[0-9]*' "$work/live.log")), batch=$batch USD (--batch-discount ${DISCOUNT:-0.5}), batch/live=$(echo "$batch / $live" | bc -l | cut -c1-5)"
fi
