#!/usr/bin/env bash
# A chat provider whose limits cannot be read (issue 25, item 4;
# docs/guides/chat.md#limits-it-cannot-read): `classify --provider chat -c 32`,
# ROWS rows of about 90 tokens, against bench/fakeprovider -chat holding
# RATE tokens a second, in the forms:
#
#   hidden    x-ratelimit-* headers of a minute's bucket (RATE*60, room in
#             it all run long) while a one-second window at RATE, which the
#             headers never show, refuses; 429s carry retry-after-ms (a few ms)
#   noheaders no x-ratelimit header at all, a one-second bucket at RATE; 429s
#             carry retry-after-ms only (vLLM, Ollama, many router providers)
#   headers   for comparison: headers that tell the truth (a one-second
#             bucket at RATE), paced by them
#   tpm       the same with --tpm RATE*60
#
# And, last (the issue's smaller item): bare 429s (no Retry-After, no
# RateLimit header) for the first 9 s, 3 rows at -c 3, the hf provider,
# BARE_RUNS times (default 3): how many runs ended with every row success.
#
# hidden and noheaders run with the default flags and with --adaptive. Each
# runs with BASE_BIN (before, e.g. /tmp/hfsent-base; skipped when unset) and
# BIN (after; default: this tree), one after the other. For each: rows that
# ended success, calls, 429s (share of calls), wall time, and wall over the
# ideal (the tokens the provider accepted over RATE; ratio_b: over those
# tokens less the one-second burst, as bench/chat_tpm.sh counts it).
#
#   BASE_BIN=/tmp/hfsent-base bench/chat_storm.sh [ROWS] [RATE] [CONCURRENCY]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-1200}
rate=${2:-5000}
conc=${3:-32}
after=${BIN:-$work/hfsent}
awk -v n="$rows" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "r%d,\"review %d: the service was fine and quick the service was fine and quick the service was fine and quick the service was fine\"\n", i, i }' >"$work/in.csv"

run() { # BIN LABEL NAME FAKEFLAGS FLAGS...
  local bin=$1 label=$2 name=$3 fakeflags=$4
  shift 4
  # shellcheck disable=SC2086
  start_fake -chat -chat-rate "$rate" -latency 20ms $fakeflags
  local t0 t1
  t0=$(date +%s.%N)
  HF_TOKEN=hf_bench "$bin" classify "$work/in.csv" -o "$work/out.csv" --no-progress --no-dedupe \
    --provider chat --model bench/chat --endpoint "http://$(fake_addr)/v1/chat/completions" --labels positive,negative \
    -c "$conc" "$@" 2>"$work/run.log" || true
  t1=$(date +%s.%N)
  stop_fake
  local calls r429 tokens
  calls=$(sed -n 's/.*chat calls=\([0-9]*\).*/\1/p' "$work/fake.log")
  r429=$(sed -n 's/.*chat calls=[0-9]* 429=\([0-9]*\).*/\1/p' "$work/fake.log")
  tokens=$(sed -n 's/.*tokens_accepted=\([0-9]*\).*/\1/p' "$work/fake.log")
  awk -v label="$label" -v name="$name" -v calls="$calls" -v r="$r429" -v tok="$tokens" -v rate="$rate" -v t0="$t0" -v t1="$t1" \
    -v rows="$rows" -v ok="$(grep -c ',success,' "$work/out.csv" || true)" 'BEGIN {
      el = t1 - t0; ideal = tok / rate
      printf "%-6s %-19s rows_ok=%d/%d calls=%d 429=%d (%.1f%%) elapsed=%.2fs ideal=%.2fs ratio=%.3f ratio_b=%.3f\n",
        label, name, ok, rows, calls, r, 100 * r / calls, el, ideal, el / ideal, el / ((tok - rate) / rate) }'
}

hidden="-chat-burst $((rate * 60)) -chat-window 1s -chat-retry-after-ms"
noheaders="-chat-no-limit-headers -chat-retry-after-ms"
echo "rows=$rows rate=$rate tokens/s concurrency=$conc"
for side in before after; do
  bin=$after
  if [[ $side == before ]]; then
    [[ -n ${BASE_BIN:-} ]] || continue
    bin=$BASE_BIN
  fi
  run "$bin" "$side" hidden "$hidden"
  run "$bin" "$side" hidden+adaptive "$hidden" --adaptive
  run "$bin" "$side" noheaders "$noheaders"
  run "$bin" "$side" noheaders+adaptive "$noheaders" --adaptive
  run "$bin" "$side" headers ""
  run "$bin" "$side" tpm "" --tpm $((rate * 60))
done

bare() { # BIN LABEL
  local good=0 i
  for i in $(seq "${BARE_RUNS:-3}"); do
    start_fake -bare-429-for 9s
    gen_csv 3 "$work/bare.csv"
    HF_TOKEN=hf_bench "$1" classify "$work/bare.csv" -o "$work/bare.out" --no-progress --no-dedupe \
      --endpoint "http://$(fake_addr)/models/bench" -c 3 2>"$work/bare.log" || true
    stop_fake
    [[ $(grep -c ',success,' "$work/bare.out" || true) == 3 ]] && good=$((good + 1))
  done
  printf "%-6s %-19s runs with every row success: %s\n" "$2" bare429-9s "$good/${BARE_RUNS:-3}"
}
[[ -n ${BASE_BIN:-} ]] && bare "$BASE_BIN" before
bare "$after" after
