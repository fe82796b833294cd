#!/usr/bin/env bash
# The cascade guide's worked tune (docs/guides/cascade.md#a-worked-tune), on
# the VADER paper's labelled tweets and movie reviews: stage 1 the embedded
# model (tune fits its calibration), stage 2 bench/fakeprovider's chat
# model answering from the gold labels, right 93% of the time
# (-chat-gold), LATENCY a call, priced at $2.50/$10 per million tokens.
#
# Tuned on one set to TARGET, then run on the other (both ways round):
# the accuracy reached against the target, the share of rows sent to stage
# 2, and cost and wall time against stage 2 alone at the same -c (every
# run with --no-cache: each call is made).
#
#   BENCH_DATA=/work/shared/data bench/cascade_quality.sh [TARGET] [LATENCY] [C]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
target=${1:-0.9}
latency=${2:-20ms}
c=${3:-16}
data=${BENCH_DATA:-../shared/data}/vader-icwsm2014
[[ -f $data/tweets.csv ]] || { echo "no $data/tweets.csv: set BENCH_DATA to the folder holding vader-icwsm2014/" >&2; exit 1; }
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); target $target, stage 2 latency $latency, -c $c"
cp "$data/movie_reviews.csv" "$work/all.csv"
tail -n +2 "$data/tweets.csv" >>"$work/all.csv"
start_fake -chat -latency "$latency" -chat-gold "$work/all.csv" -chat-gold-p 0.93
stage2="  - provider: chat
    model: strong
    endpoint: http://$(fake_addr)/v1/chat/completions
    labels: [positive, negative]
    price-in: 2.5
    price-out: 10
    concurrency: $c"
printf '# cheap first\nstages:\n  - provider: local   # free, offline\n%s\n' "$stage2" >"$work/cascade.yaml"
printf 'stages:\n%s\n' "$stage2" >"$work/strong.yaml"
export HOME=$work # the response cache of the tune runs
run() { # NAME INPUT CASCADE: wall seconds, accuracy, share to stage 2, cost
  /usr/bin/time -f "%e" -o "$work/time" "$work/hfsent" classify "$2" --cascade "$3" --gold-column gold --no-cache --no-progress \
    -o "$work/$1.csv" --summary-json "$work/$1.json" 2>"$work/$1.log" || true
  # Accuracy over every row (a failed row is wrong), as tune counts it.
  python3 - "$work/$1.json" "$(tail -1 "$work/time")" "$1" "$work/$1.csv" "$2" <<'PY'
import csv, json, sys
s = json.load(open(sys.argv[1]))
gold = {r["request_id"]: r["gold"].strip().lower() for r in csv.DictReader(open(sys.argv[5], newline=""))}
rows = list(csv.DictReader(open(sys.argv[4], newline="")))
acc = sum(r["label"].strip().lower() == gold.get(r["request_id"]) for r in rows) / len(rows)
st = s.get("stages") or []
# Sent to stage 2: the rows that reached it, whatever it answered (its
# "rows" are only those it labelled: a row it failed is sent on all the same).
share = st[1]["reached"] / s["rows"] if len(st) > 1 else 1.0
print(f"{sys.argv[3]} {sys.argv[2]} {acc:.3f} {share:.3f} {s['cost_usd'] or 0:.4f}")
PY
}
for pair in "movie_reviews tweets" "tweets movie_reviews"; do
  set -- $pair
  echo "== tuned on $1, target $target"
  "$work/hfsent" tune "$data/$1.csv" --cascade "$work/cascade.yaml" --target-accuracy "$target" -o "$work/tuned-$1.yaml" 2>"$work/tune.log" || echo "(tune exited $?: see above)"
  [[ -f $work/tuned-$1.yaml ]] || continue
  grep -E 'escalate-below|escalates' "$work/tuned-$1.yaml" | sed 's/^ */   /'
  for set in "$1" "$2"; do
    read -r _ cw ca cs cc < <(run "cascade-$set" "$data/$set.csv" "$work/tuned-$1.yaml")
    read -r _ sw sa _ sc < <(run "strong-$set" "$data/$set.csv" "$work/strong.yaml")
    echo "   run on $set: accuracy $ca (target $target; stage 2 alone $sa), share to stage 2 $cs, cost \$$cc vs \$$sc ($(echo "scale=3; $cc / $sc" | bc)x), wall ${cw}s vs ${sw}s ($(echo "scale=3; $cw / $sw" | bc)x)"
  done
done
