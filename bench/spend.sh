#!/usr/bin/env bash
# The spend ledger's figures (docs/guides/cost.md#figures).
#
#   1. --max-spend's overshoot at -c CONC: ROWS rows through the fake chat
#      server (20 ms a call), at $100 per million tokens in and out (a row
#      costs about half a cent), with --max-spend LIMIT, ROUNDS times: what
#      the run spent against the limit, and the rows it sent;
#   2. the dry run's estimate against the run's usage: --dry-run, then the
#      run, on texts of different lengths: the prompt and completion
#      tokens and the cost, estimated and reported.
#
#   bench/spend.sh [ROWS] [CONC] [LIMIT] [ROUNDS]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-2000}
conc=${2:-32}
limit=${3:-2}
rounds=${4:-5}
awk -v n="$rows" 'BEGIN { srand(7); print "request_id,text"; for (i = 0; i < n; i++) { t = "review " i; k = int(rand() * 12); for (j = 0; j < k; j++) t = t " the service was fine and quick"; printf "r%d,\"%s\"\n", i, t } }' >"$work/in.csv"
start_fake -chat -latency 20ms
chat=(--provider chat --model bench/chat --labels positive,negative --endpoint "http://$(fake_addr)/v1/chat/completions" --no-cache --no-progress)
echo "max-spend: $rows rows, -c $conc, \$100/M tokens, --max-spend $limit"
for i in $(seq "$rounds"); do
  HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o "$work/o.csv" -c "$conc" "${chat[@]}" --price-in 100 --price-out 100 \
    --max-spend "$limit" --summary-json "$work/s.json" 2>"$work/s.log" || true
  python3 - "$work/s.json" "$limit" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); limit = float(sys.argv[2])
per = s["cost_usd"] / max(1, s["calls"])
print(f"  spent={s['cost_usd']:.6f} limit={limit} overshoot={s['cost_usd'] - limit:+.6f} ({(s['cost_usd'] - limit) / per:+.2f} calls) "
      f"calls={s['calls']} not_attempted={s['outcomes']['not_attempted']} stop={s.get('stop', '')}")
PY
done
echo "dry run against the run ($rows rows, texts of 2 to 90 words):"
HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" "${chat[@]}" --price-in 0.15 --price-out 0.6 --dry-run --summary-json "$work/d.json" 2>"$work/d.log"
HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o "$work/r.csv" -c "$conc" "${chat[@]}" --price-in 0.15 --price-out 0.6 --summary-json "$work/r.json" 2>"$work/r.log"
stop_fake
python3 - "$work/d.json" "$work/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["estimate"]; r = json.load(open(sys.argv[2]))
for k in ("prompt_tokens", "completion_tokens", "cost_usd"):
    print(f"  {k:18s} estimated={d[k]:<12g} reported={r[k]:<12g} error={100 * (d[k] - r[k]) / r[k]:+.1f}%")
PY
