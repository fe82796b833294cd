#!/usr/bin/env bash
# The quality guide's figures (docs/guides/quality.md#figures), on the
# VADER paper's labelled tweets and movie reviews, with the local model.
#
#   1. calibrate on one set, apply to the other (both directions), and on
#      each set, fit on its odd rows and apply to its even rows (no
#      drift): before and after, on the rows not fitted on, the ECE, the
#      accuracy of the top 30% of rows by score against the whole set's,
#      and the share of rows kept when the kept rows first reach 0.95
#      accuracy. bench/quality_figures.py computes them from the results
#      and the gold labels alone, as a reader would; hfsent's own ECE is
#      printed beside it (they must agree).
#   1b. how many gold rows are enough: fitted on N odd rows of the movie
#      reviews drawn at random, for N from 50 to 3000, judged on the even
#      rows;
#   2. the time --gold-column and --calibration add to a run of ROWS rows
#      (the two sets' texts repeated, ids unique), against the same run
#      without them, ROUNDS times in turn: wall and CPU seconds of each,
#      and the ratio of the medians. The local model answers in
#      microseconds, so this is the most the flags can add; against a
#      remote model it is lost in the calls.
#
#   3. with BASE_BIN (a build of main), the same run at the default flags
#      with that build and this one, in turn: what the work costs a run
#      that does not use it.
#
#   BENCH_DATA=/work/shared/data [BASE_BIN=/tmp/hfsent-base] bench/quality.sh [ROWS] [ROUNDS]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-100000}
rounds=${2:-5}
data=${BENCH_DATA:-../shared/data}/vader-icwsm2014
[[ -f $data/tweets.csv ]] || { echo "no $data/tweets.csv: set BENCH_DATA to the folder holding vader-icwsm2014/" >&2; exit 1; }
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
hf() { "$work/hfsent" "$@"; }
local_run() { hf classify "$1" --provider local --no-progress -o "$2" "${@:3}"; }

# Odd and even rows of each set: fitted on one half, judged on the other.
for set in tweets movie_reviews; do
  cp "$data/$set.csv" "$work/$set.csv"
  awk -F, 'NR == 1 || NR % 2 == 0' "$data/$set.csv" >"$work/$set.odd.csv"
  awk -F, 'NR == 1 || NR % 2 == 1' "$data/$set.csv" >"$work/$set.even.csv"
  for part in "$set" "$set.odd" "$set.even"; do
    local_run "$work/$part.csv" "$work/$part.res.csv" 2>/dev/null
  done
done
figures() { # FIT APPLY: calibrate on FIT's results, judge APPLY's rows before and after
  local fit=$1 apply=$2
  hf calibrate "$work/$fit.res.csv" --gold "$work/$fit.csv" -o "$work/$fit.cal.json" 2>"$work/cal.log"
  local_run "$work/$apply.csv" "$work/$apply.cal.csv" --calibration "$work/$fit.cal.json" --gold-column gold 2>"$work/run.log"
  echo "== fitted on $fit ($(grep -o 'rows=[0-9]*' "$work/cal.log" | head -1)), applied to $apply"
  python3 bench/quality_figures.py "$work/$apply.res.csv" "$work/$apply.csv" before
  python3 bench/quality_figures.py "$work/$apply.cal.csv" "$work/$apply.csv" after
  echo "   hfsent's own line: $(grep -o 'quality: .*ece=[0-9.]*' "$work/run.log")"
}
figures tweets movie_reviews
figures movie_reviews tweets
figures tweets.odd tweets.even
figures movie_reviews.odd movie_reviews.even

# 1b. How many gold rows: fitted on N odd rows of the movie reviews (the
# harder set) drawn at random (the file is sorted by label: its first rows
# are a biased sample), judged on all the even ones.
echo "== fitted on N odd movie reviews drawn at random, applied to the even ones"
for n in 50 100 300 1000 3000; do
  python3 -c 'import random, sys
lines = open(sys.argv[1]).read().splitlines()
body = lines[1:]
random.Random(1).shuffle(body)
print("\n".join([lines[0]] + body[: int(sys.argv[2])]))' "$work/movie_reviews.odd.csv" "$n" >"$work/mv$n.csv"
  local_run "$work/mv$n.csv" "$work/mv$n.res.csv" 2>/dev/null
  hf calibrate "$work/mv$n.res.csv" --gold "$work/mv$n.csv" -o "$work/mv$n.cal.json" 2>/dev/null
  local_run "$work/movie_reviews.even.csv" "$work/mv$n.even.csv" --calibration "$work/mv$n.cal.json" 2>/dev/null
  printf "   N=%-5s" "$n"
  python3 bench/quality_figures.py "$work/mv$n.even.csv" "$work/movie_reviews.even.csv" after
done
# And a sample that is not random: the first 1,000 odd rows (the file is
# sorted by label).
head -n 1001 "$work/movie_reviews.odd.csv" >"$work/mvfirst.csv"
local_run "$work/mvfirst.csv" "$work/mvfirst.res.csv" 2>/dev/null
hf calibrate "$work/mvfirst.res.csv" --gold "$work/mvfirst.csv" -o "$work/mvfirst.cal.json" 2>/dev/null
local_run "$work/movie_reviews.even.csv" "$work/mvfirst.even.csv" --calibration "$work/mvfirst.cal.json" 2>/dev/null
printf "   first 1000 "
python3 bench/quality_figures.py "$work/mvfirst.even.csv" "$work/movie_reviews.even.csv" after

# 2. Time on ROWS rows.
awk -F, -v n="$rows" 'FNR == 1 { next } { line[++k] = $0 }
  END { print "request_id,text,gold,gold_mean"; for (i = 0; i < n; i++) { l = line[i % k + 1]; sub(/^[^,]*/, "r" i, l); print l } }' \
  "$data/tweets.csv" "$data/movie_reviews.csv" >"$work/big.csv"
timed() { # NAME ARGS...: wall and CPU seconds of one run
  local name=$1 bin=$work/hfsent
  shift
  [[ $name == base ]] && bin=$work/hfsent-base
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$bin" classify "$work/big.csv" --provider local --no-progress -o /dev/null "$@" 2>"$work/$name.log"
  read -r wall user sys <"$work/time"
  echo "$name $wall $(echo "$user + $sys" | bc)" >>"$work/times"
  printf "%-8s wall=%ss cpu=%ss %s\n" "$name" "$wall" "$(echo "$user + $sys" | bc)" "$(grep -o 'accuracy=[0-9.]*' "$work/$name.log" | head -1 || true)"
}
# BASE_BIN, when set, is a build without this work (main's): its run with
# the default flags is timed too, to show they pay nothing for it.
[[ -n ${BASE_BIN:-} ]] && cp "$BASE_BIN" "$work/hfsent-base"
echo "== $rows rows, --provider local, $rounds rounds in turn"
for i in $(seq "$rounds"); do
  [[ -n ${BASE_BIN:-} ]] && timed base
  timed plain
  timed quality --gold-column gold --calibration "$work/tweets.cal.json" --calibration-force
done
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for col in 2 3; do
  p=$(awk -v c="$col" '$1 == "plain" { print $c }' "$work/times" | median)
  q=$(awk -v c="$col" '$1 == "quality" { print $c }' "$work/times" | median)
  echo "median $( [[ $col == 2 ]] && echo wall || echo cpu ): plain ${p}s, with --gold-column and --calibration ${q}s, ratio $(echo "scale=3; $q / $p" | bc)"
  if [[ -n ${BASE_BIN:-} ]]; then
    b=$(awk -v c="$col" '$1 == "base" { print $c }' "$work/times" | median)
    echo "   default flags: BASE_BIN ${b}s, this tree ${p}s, ratio $(echo "scale=3; $p / $b" | bc)"
  fi
done
