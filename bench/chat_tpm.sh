#!/usr/bin/env bash
# Token pacing against a provider's token bucket (docs/guides/chat.md#token-limits).
#
# The fake chat server (bench/fakeprovider -chat) holds a token bucket of
# RATE tokens a second and one second's worth of burst, charges each call
# its prompt and completion tokens when it arrives, and answers 429 (with
# x-ratelimit-remaining-tokens / -reset-tokens, no Retry-After) when they are
# not there; every answer carries those headers. hfsent classifies ROWS rows
# through it twice, side by side:
#
#   tpm      --tpm RATE*60: our own bucket at the provider's rate
#   headers  no --tpm: paced by the server's x-ratelimit headers alone
#   none     for comparison: no --tpm, and the server sends its headers with
#            its 429s only, so nothing paces the calls before a refusal
#
# For each: calls, 429s (share of calls), wall time, and the ideal time:
# the tokens the provider accepted less its burst, over its rate (no client
# can be faster without being refused).
#
#   bench/chat_tpm.sh [ROWS] [RATE] [CONCURRENCY]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-400}
rate=${2:-2000}
conc=${3:-8}
# Texts of different lengths, so that the estimate is not one number.
awk -v n="$rows" 'BEGIN { srand(7); print "request_id,text"; for (i = 0; i < n; i++) { t = "review " i; k = int(rand() * 12); for (j = 0; j < k; j++) t = t " the service was fine and quick"; printf "r%d,\"%s\"\n", i, t } }' >"$work/in.csv"

run() { # NAME FAKEFLAGS FLAGS...
  local name=$1 fakeflags=$2
  shift 2
  # shellcheck disable=SC2086
  start_fake -chat -chat-rate "$rate" -latency 20ms $fakeflags
  local t0 t1
  t0=$(date +%s.%N)
  HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o "$work/$name.csv" --no-progress --no-dedupe \
    --provider chat --model bench/chat --endpoint "http://$(fake_addr)/v1/chat/completions" --labels positive,negative \
    -c "$conc" --summary-json "$work/$name.json" "$@" 2>"$work/$name.log" || true
  t1=$(date +%s.%N)
  stop_fake
  local calls r429 tokens
  calls=$(sed -n 's/.*chat calls=\([0-9]*\).*/\1/p' "$work/fake.log")
  r429=$(sed -n 's/.*chat calls=[0-9]* 429=\([0-9]*\).*/\1/p' "$work/fake.log")
  tokens=$(sed -n 's/.*tokens_accepted=\([0-9]*\).*/\1/p' "$work/fake.log")
  awk -v name="$name" -v calls="$calls" -v r="$r429" -v tok="$tokens" -v rate="$rate" -v t0="$t0" -v t1="$t1" \
    -v ok="$(grep -c ',success,' "$work/$name.csv")" 'BEGIN {
      el = t1 - t0; ideal = (tok - rate) / rate
      printf "%-8s rows_ok=%d calls=%d 429=%d (%.2f%%) tokens=%d elapsed=%.2fs ideal=%.2fs ratio=%.3f\n", name, ok, calls, r, 100 * r / calls, tok, el, ideal, el / ideal }'
}

echo "rows=$rows bucket=${rate} tokens/s (burst ${rate}) concurrency=$conc"
run tpm "" --tpm $((rate * 60))
run headers ""
run none -chat-headers-on-429-only
