#!/usr/bin/env bash
# Peak memory of classify --provider chat when --prompt-file, or the prompt
# it makes, is over its bound (docs/guides/chat.md#the-prompts-bound):
#   zero      --prompt-file /dev/zero, under ulimit -v (LIMIT_MB, 3072): a
#             build that reads it without a bound dies out of memory
#             instead of taking the machine's
#   file      --prompt-file of FILE_MB (300) MB
#   template  a 60 KB template holding {text} 10,000 times, 8 rows of 3.5 KB,
#             against the fake chat server (which reads 8 MiB of a body)
# Runs this tree's build and, beside it, the build before the bounds
# (BASE_BIN, else BASE, default main, built from git). Prints exit code, peak
# RSS (GNU time) and the first line of stderr or the outcomes.
#   bench/prompt_bounds.sh
set -euo pipefail
[[ -x /usr/bin/time ]] || { echo "needs GNU time: apt-get install -y time" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
limit=${LIMIT_MB:-3072}; file_mb=${FILE_MB:-300}
if [[ -n ${BASE_BIN:-} ]]; then
  cp "$BASE_BIN" "$work/hfsent-base"
else
  mkdir "$work/base"
  git archive "${BASE:-main}" | tar -x -C "$work/base"
  (cd "$work/base" && go build -o "$work/hfsent-base" ./cmd/hfsent)
fi

{ printf 'Pick one of {labels}: {text}\n'; head -c $((file_mb << 20)) /dev/zero | tr '\0' 'x'; } >"$work/big.txt"
{ printf 'Pick one of {labels}.\n'; for _ in $(seq 10000); do printf '{text}'; done; } >"$work/template.txt"
awk 'BEGIN { print "request_id,text"; t = ""; for (j = 0; j < 125; j++) t = t "a long review of the service "; for (i = 0; i < 8; i++) printf "r%d,%s %d\n", i, t, i }' >"$work/in.csv"
start_fake -chat -latency 5ms
chat=(--provider chat --model bench/chat --endpoint "http://$(fake_addr)/v1/chat/completions" --labels positive,negative --no-progress)

measure() { # LABEL CMD...: exit code, peak RSS, what it said
  local label=$1; shift
  local rc=0
  /usr/bin/time -f '%M' -o "$work/rss" "$@" >"$work/out" 2>"$work/err" || rc=$?
  local said
  said=$(grep -m1 -E 'hfsent:|rows=|fatal error' "$work/err" | cut -c1-120 || true)
  printf '%-28s exit %d  peak RSS %7.1f MiB  %s\n' "$label" "$rc" "$(tail -n 1 "$work/rss" | awk '{ print $1 / 1024 }')" "$said"
}

for build in base this; do
  bin=$work/hfsent; [[ $build == base ]] && bin=$work/hfsent-base
  measure "$build: /dev/zero" sh -c "ulimit -v $((limit << 10)) && exec \"\$@\"" sh "$bin" classify "$work/in.csv" -o "$work/z-$build.csv" "${chat[@]}" --prompt-file /dev/zero
  measure "$build: a $file_mb MB file" "$bin" classify "$work/in.csv" -o "$work/f-$build.csv" "${chat[@]}" --prompt-file "$work/big.txt"
  measure "$build: {text} x 10,000" "$bin" classify "$work/in.csv" -o "$work/t-$build.csv" "${chat[@]}" --prompt-file "$work/template.txt"
done
