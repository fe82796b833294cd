#!/usr/bin/env bash
# What the cascade's machinery (internal/stage, the engine's stages) costs
# a run that has no cascade: the same runs at the default flags with
# BASE_BIN (a build of main before it) and this tree, ROUNDS times in
# turn, and the ratio of the medians of wall and CPU seconds:
#
#   local    ROWS rows, --provider local (the embedded model answers in
#            microseconds: the engine's own cost per row shows most);
#   remote   ROWS rows against bench/fakeprovider (HF API, no latency, -c 16:
#            the cost per call).
#
# Then one cascade run of the same rows, the embedded model first and the
# fake's chat model for the rows it answers NEUTRAL (a constant
# calibration: bench's stand-in, not a fitted one): the share sent on,
# the calls of each stage, and the time against the embedded model alone.
#
#   BASE_BIN=/tmp/hfsent-base bench/cascade.sh [ROWS] [ROUNDS]
set -euo pipefail
rows=${1:-100000}
rounds=${2:-7}
[[ -n ${BASE_BIN:-} ]] || { echo "set BASE_BIN to a build of main (go build -o /tmp/hfsent-base ./cmd/hfsent in a checkout of it)" >&2; exit 1; }
source "$(dirname "$0")/lib.sh"
cp "$BASE_BIN" "$work/hfsent-base"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Texts of three kinds, ids unique: the embedded model answers the first
# POSITIVE, the second NEGATIVE, the third NEUTRAL.
awk -v n="$rows" 'BEGIN { print "request_id,text"; split("I love it, wonderful service %d|Terrible and awful, the worst %d|The visit is booked for day %d", t, "|")
  for (i = 0; i < n; i++) printf "r%d,\"%s\"\n", i, sprintf(t[i % 3 + 1], i) }' >"$work/in.csv"
start_fake -latency 0
fake=http://$(fake_addr)

timed() { # NAME BIN ARGS...: wall and CPU seconds of one run
  local name=$1 bin=$2
  shift 2
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$bin" classify "$work/in.csv" --no-progress --no-cache -o /dev/null "$@" 2>"$work/$name.log" || true
  read -r wall user sys <"$work/time"
  echo "$name $wall $(echo "$user + $sys" | bc)" >>"$work/times"
}
echo "== $rows rows, $rounds rounds in turn: BASE_BIN and this tree at the default flags"
for _ in $(seq "$rounds"); do
  timed local-base "$work/hfsent-base" --provider local
  timed local-this "$work/hfsent" --provider local
  timed remote-base "$work/hfsent-base" --endpoint "$fake" -c 16
  timed remote-this "$work/hfsent" --endpoint "$fake" -c 16
done
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for run in local remote; do
  for col in 2 3; do
    b=$(awk -v c="$col" -v n="$run-base" '$1 == n { print $c }' "$work/times" | median)
    t=$(awk -v c="$col" -v n="$run-this" '$1 == n { print $c }' "$work/times" | median)
    printf "%-7s median %-4s BASE_BIN %ss, this tree %ss, ratio %s\n" "$run" "$([[ $col == 2 ]] && echo wall || echo cpu)" "$b" "$t" "$(echo "scale=3; $t / $b" | bc)"
  done
done

# One cascade run.
stop_fake
start_fake -chat -latency 0
python3 - "$work/local.json" <<'EOF'
import json, sys
# The embedded model's fitted_for, as hfsent computes it for --provider local.
json.dump({"format": "hfsent-calibration/1", "fitted_for": {"provider": "local", "model": "local/vader", "labels": [], "label_map": "",
  "request_sha256": ""}, "method": "isotonic-shrunk", "prior_rows": 10, "min_label_rows": 100, "rows": 0,
  "label_rows": {}, "labels": {"neutral": {"rows": 0, "correct": 0, "points": [[0, 0.1], [1, 0.1]]}},
  "pooled": {"rows": 0, "correct": 0, "points": [[0, 0.9], [1, 0.9]]}}, open(sys.argv[1], "w"))
EOF
cat >"$work/cascade.yaml" <<EOF
stages:
  - provider: local
    calibration: $work/local.json
    calibration-force: true   # bench's constant calibration was fitted for nothing
    escalate-below: 0.5
  - provider: chat
    model: strong
    endpoint: http://$(fake_addr)/v1/chat/completions
    labels: [POSITIVE, NEGATIVE, NEUTRAL]
    concurrency: 16
EOF
/usr/bin/time -f "%e" -o "$work/time" "$work/hfsent" classify "$work/in.csv" --no-progress --no-cache -o /dev/null --cascade "$work/cascade.yaml" 2>"$work/cascade.log" || true
echo "== a cascade of the same rows (stage 2 a chat fake on loopback, no latency): $(cat "$work/time")s"
grep -o 'stage[0-9]_[a-z_]*=[0-9.]*' "$work/cascade.log" | tr '\n' ' '
echo
