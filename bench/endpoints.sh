#!/usr/bin/env bash
# The endpoints of today (issue 17), replayed on loopback by bench/fakeprovider
# (-tei, -replay, -scale-to-zero, -ratelimit-window, -bare-429-for,
# -max-words), each case run through the real binary. Not a test: it prints,
# per case, the exit code, the wall time, the calls the fake got, the
# outcomes, and what the case is about. HFSENT_BIN=path runs another build
# (the one before, to compare side by side).
#
#   bench/endpoints.sh                 # every case
#   CASES="tei-pairs gone-410" bench/endpoints.sh
#   LIMIT=400 bench/endpoints.sh        # seconds before a run is cut off
#                                      # (ratelimit-300s needs 300 and more)
set -euo pipefail
LIMIT=${LIMIT:-400}
CASES=${CASES:-"tei-pairs tei-predict-url gone-410 redirect-301 wrong-task wrong-task-batch down-503 cold long-text ratelimit-300s bare-429 cdn-52x quota-402"}
command -v jq >/dev/null || { echo "needs jq: apt-get install -y jq" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"

# pairs.csv: even rows read positive, odd rows negative, to the fake's model.
awk 'BEGIN { print "request_id,text"; for (i = 0; i < 40; i++) printf "r%d,text %d: a %s repair\n", i, i, (i % 2 ? "terrible" : "lovely") }' >"$work/pairs.csv"
gen_csv 200 "$work/rows200.csv" "order arrived on time and works well"
gen_csv 30 "$work/rows30.csv" "order arrived on time and works well"
gen_csv 10 "$work/rows10.csv" "order arrived on time and works well"
awk 'BEGIN { print "request_id,text"; long = ""; for (w = 0; w < 120; w++) long = long " word"; for (i = 0; i < 10; i++) printf "r%d,\"%s %d%s\"\n", i, (i % 2 ? "long" : "short"), i, (i % 2 ? long : " text") }' >"$work/long.csv"

final_rows() { # rows kept by --resume: success, fallback, invalid_input, upstream_request_rejected
  awk -F, 'NR > 1 && ($5 == "success" || $5 == "fallback" || $5 == "invalid_input" || $5 == "upstream_request_rejected") { n++ } END { print n + 0 }' "$1"
}

# one NAME INPUT FAKE-FLAGS -- HFSENT-FLAGS
one() {
  local name=$1 input=$2; shift 2
  local fake=()
  while [[ $1 != -- ]]; do fake+=("$1"); shift; done
  shift
  start_fake "${fake[@]}"
  local url="http://$(fake_addr)" args=() t0 t1 rc=0
  for a in "$@"; do args+=("${a//@URL@/$url}"); done
  t0=$(date +%s.%N)
  timeout "$LIMIT" "$work/hfsent" classify "$work/$input" -o "$work/$name.csv" --summary-json "$work/$name.json" \
    --no-progress "${args[@]}" 2>"$work/$name.err" || rc=$?
  t1=$(date +%s.%N)
  stop_fake
  echo "== $name: hfsent classify $input ${args[*]//$url/URL}  (fake: ${fake[*]})"
  printf '  exit=%s wall=%.1fs %s\n' "$rc" "$(echo "$t1 - $t0" | bc -l)" "$(grep -o 'calls=[0-9]*' "$work/fake.log" | tail -1 | sed 's/^/fake_/')"
  if [[ -s $work/$name.json ]]; then
    jq -r '"  outcomes: " + ([.outcomes | to_entries[] | select(.value > 0) | "\(.key)=\(.value)"] | join(" "))' "$work/$name.json"
  elif [[ $rc == 124 ]]; then
    echo "  cut off after ${LIMIT}s: $(($(wc -l <"$work/$name.csv") - 1)) rows written"
  fi
  [[ -s $work/$name.csv ]] && echo "  rows final for --resume: $(final_rows "$work/$name.csv") of $(($(wc -l <"$work/$name.csv") - 1))"
  grep -E 'stopped sending|error|unknown flag' "$work/$name.err" | grep -v '^rows=' | head -2 | cut -c1-300 | sed 's/^/  stderr: /' || true
}

labels_right() { # the pairs.csv rows labelled as their text reads
  awk -F, 'NR > 1 { want = ($1 ~ /[13579]$/) ? "NEGATIVE" : "POSITIVE"; if ($3 == want) ok++; n++ } END { printf "  labels right: %d of %d\n", ok, n }' "$1"
}

for c in $CASES; do
  case $c in
    tei-pairs) one tei-pairs pairs.csv -tei -latency 5ms -- --endpoint @URL@/ --batch-size 2 -c 4
      labels_right "$work/tei-pairs.csv" ;;
    tei-predict-url) one tei-predict-url pairs.csv -tei -latency 5ms -- --endpoint @URL@/predict --batch-size 8 -c 4
      labels_right "$work/tei-predict-url.csv" ;;
    gone-410) one gone-410 rows200.csv -replay endpoint_410_gone -- --endpoint @URL@/models/x -c 4 ;;
    redirect-301) one redirect-301 rows200.csv -replay endpoint_301_then_405 -- --endpoint @URL@/models/x -c 4 ;;
    wrong-task) one wrong-task rows200.csv -replay router_422_text_plain -- --endpoint @URL@/models/x -c 4 --batch-size 2 ;;
    wrong-task-batch) one wrong-task-batch rows200.csv -replay toolkit_400_wrong_task -- --endpoint @URL@ -c 4 --batch-size 16 ;;
    down-503) one down-503 rows30.csv -replay router_503_html -- --endpoint @URL@/models/x ;;
    cold) one cold rows10.csv -scale-to-zero 20s -latency 5ms -- --endpoint @URL@/models/x ;;
    long-text) one long-text long.csv -max-words 50 -latency 5ms -- --endpoint @URL@/models/x ;;
    ratelimit-300s) one ratelimit-300s rows10.csv -ratelimit-window 300s -latency 5ms -- --endpoint @URL@/models/x -c 2 ;;
    bare-429) one bare-429 rows10.csv -bare-429-for 6s -latency 5ms -- --endpoint @URL@/models/x -c 2 ;;
    cdn-52x) one cdn-52x rows10.csv -replay cdn_52x -replay-then-ok -latency 5ms -- --endpoint @URL@/models/x -c 1 ;;
    quota-402) one quota-402 rows10.csv -replay router_402_depleted -- --endpoint @URL@/models/x -c 1
      echo "  error column: $(awk -F, 'NR == 2 { print }' "$work/quota-402.csv" | cut -c1-220)" ;;
  esac
done
