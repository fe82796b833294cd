#!/usr/bin/env bash
# bench/ollama.sh BIN...: the figures of --provider chat against a real
# Ollama, for each hfsent binary given (an older one beside this one, say),
# side by side in one run:
#
#   tiny       the 13 sample rows on `tiny` (random weights), default flags,
#              -c 4: rows labelled, calls a row
#   score      the same on `tiny-label`: the scores written
#   truncated  a 3,008-character text and a short one on `tiny-label` (a
#              512-token context): the long one's outcome and prompt_tokens
#   overload   64 rows on `tiny-label`, -c 16 --timeout 60s --retries 8,
#              OLLAMA_MAX_QUEUE=2 OLLAMA_MAX_LOADED_MODELS=1, another client
#              asking `tiny` in a loop (model swaps): wall time, breaker
#              openings, busy answers retried (429s=)
#
# Needs HFSENT_TEST_OLLAMA, the Ollama directory the e2e tests use (see the
# development guide); serves it on $PORT (default 11564) and $PORT+1.
#
#   bench/ollama.sh /tmp/hfsent-old bin/hfsent
set -euo pipefail
dir=${HFSENT_TEST_OLLAMA:?set HFSENT_TEST_OLLAMA to the Ollama directory}
port=${PORT:-11564}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
# Each server in its own process group, stopped with its model runners.
stop() { kill -TERM -- "-$1" 2>/dev/null || true; sleep 2; kill -KILL -- "-$1" 2>/dev/null || true; }
trap 'for p in "${pids[@]}"; do stop "$p"; done; rm -rf "$work"' EXIT

serve() { # serve PORT [ENV...]: start ollama serve, wait for it; sets $pid
  local p=$1; shift
  setsid env "$@" HOME="$work" OLLAMA_HOST=127.0.0.1:$p OLLAMA_MODELS="$dir/models" \
    "$dir/bin/ollama" serve > "$work/serve-$p.log" 2>&1 &
  pid=$!; pids+=("$pid")
  for _ in $(seq 100); do curl -fsS -m 1 "http://127.0.0.1:$p/api/version" > /dev/null 2>&1 && return; sleep 0.2; done
  echo "ollama serve does not answer on $p" >&2; exit 1
}

python3 - "$work" <<'EOF'
import csv, sys
d = sys.argv[1]
with open(d + '/long.csv', 'w', newline='') as f:
    w = csv.writer(f); w.writerow(['request_id', 'text'])
    w.writerow(['L1', ('The parcel came late and the box was torn. ' * 70)[:3007] + '.'])
    w.writerow(['S1', 'Short and sweet!'])
with open(d + '/rows64.csv', 'w', newline='') as f:
    w = csv.writer(f); w.writerow(['request_id', 'text'])
    for i in range(64):
        w.writerow(['R%02d' % i, 'Row number %d was %s' % (i, 'great!' if i % 2 == 0 else 'slow.')])
EOF

labels=(--provider chat --labels positive,negative,neutral)
col() { # col FILE NAME: the column NAME of the results FILE, one value a row
  python3 -c 'import csv,sys; [print(r[sys.argv[2]]) for r in csv.DictReader(open(sys.argv[1]))]' "$1" "$2"
}
count() { grep -o "$2=[0-9]*" <<< "$1" | head -1 | cut -d= -f2; }

serve "$port"
ep=http://127.0.0.1:$port/v1/chat/completions
for bin in "$@"; do
  echo "== $bin"
  err=$(HF_TOKEN=x "$bin" classify "$here/samples/feedback.csv" -o "$work/t.csv" --no-progress -c 4 "${labels[@]}" --model tiny --endpoint "$ep" 2>&1 || true)
  ok=$(col "$work/t.csv" outcome | grep -c '^success$' || true)
  calls=$(count "$err" calls)
  echo "tiny       labelled=$ok/13 calls=$calls calls/row=$(echo "scale=2; $calls/13" | bc)"
  HF_TOKEN=x "$bin" classify "$here/samples/feedback.csv" -o "$work/s.csv" --no-progress -c 4 "${labels[@]}" --model tiny-label --endpoint "$ep" 2> /dev/null || true
  echo "score      $(col "$work/s.csv" score | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  HF_TOKEN=x "$bin" classify "$work/long.csv" -o "$work/l.csv" --no-progress -c 1 "${labels[@]}" --model tiny-label --endpoint "$ep" 2> /dev/null || true
  echo "truncated  L1=$(col "$work/l.csv" outcome | head -1) prompt_tokens=$(col "$work/l.csv" prompt_tokens | head -1) S1=$(col "$work/l.csv" outcome | tail -1)"
done

stop "$pid"
serve $((port + 1)) OLLAMA_MAX_QUEUE=2 OLLAMA_MAX_LOADED_MODELS=1
ep=http://127.0.0.1:$((port + 1))/v1/chat/completions
for bin in "$@"; do
  more=()
  # A short answer keeps the server's turns short (the breaker is measured).
  if "$bin" classify --help 2>&1 | grep -q -- --constrain; then more=(--constrain off); fi
  ( while true; do curl -s -o /dev/null "$ep" -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'; done ) &
  swap=$!
  start=$(date +%s.%N)
  err=$(HF_TOKEN=x "$bin" classify "$work/rows64.csv" -o "$work/o.csv" --no-progress -c 16 --timeout 60s --retries 8 "${labels[@]}" \
    --model tiny-label --endpoint "$ep" "${more[@]}" 2>&1 || true)
  end=$(date +%s.%N)
  kill "$swap"; wait "$swap" 2> /dev/null || true
  ok=$(col "$work/o.csv" outcome | grep -c '^success$' || true)
  echo "overload   $bin: success=$ok/64 wall=$(echo "$end - $start" | bc | cut -c1-6)s breaker_openings=$(grep -c 'breaker open' <<< "$err" || true) calls=$(count "$err" calls) busy_retried=$(count "$err" 429s)"
done
