#!/usr/bin/env bash
# A second push into an existing batch: ROWS rows pushed into a fresh batch,
# then ROWS more rows (other ids; SECOND rows, when set) pushed into the same
# batch. The second
# push checks its ids against the batch's (the overlap check): its wall time
# is the figure. Each size runs in a database of its own. TIMEOUT (seconds, default 600) stops a push that takes
# longer, and says so.
#   bench/queue_push_overlap.sh [ROWS...]     default: 100000
#   HFSENT_BIN=/path/to/old/hfsent bench/queue_push_overlap.sh 2000 10000
#   SECOND=1000 bench/queue_push_overlap.sh 1000000   # a small push into a big batch
set -euo pipefail
sizes=("${@:-100000}")
timeout_s=${TIMEOUT:-600}
source "$(dirname "$0")/lib.sh"
for n in "${sizes[@]}"; do
  # A fresh database for each size: the planner knows nothing of the rows
  # just copied in (no ANALYZE has run), as after any first push.
  [[ -n $db_name ]] && psql "$db_admin" -qc "drop database if exists $db_name with (force)" >/dev/null
  new_db
  awk -v n="$n" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "a%d,\"first file, review %d\"\n", i, i }' >"$work/a.csv"
  m=${SECOND:-$n}
  awk -v n="$m" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "b%d,\"second file, review %d\"\n", i, i }' >"$work/b.csv"
  batch="overlap_$n"
  for f in a b; do
    start=$(date +%s.%N)
    rc=0
    timeout "$timeout_s" "$work/hfsent" queue push "$work/$f.csv" --db "$db" --batch "$batch" --no-progress 2>"$work/push.log" || rc=$?
    end=$(date +%s.%N)
    if [[ $rc == 124 ]]; then
      printf '%d + %d rows: push %s not done after %ds (stopped)\n' "$n" "$m" "$f" "$timeout_s"
      break
    elif [[ $rc != 0 ]]; then
      cat "$work/push.log" >&2
      exit 1
    fi
    sed "s/^/    /" "$work/push.log"
    label=first
    [[ $f == b ]] && label="second (overlap check against $n rows)"
    printf '%d + %d rows: %s push %.2fs\n' "$n" "$m" "$label" "$(echo "$end - $start" | bc -l)"
  done
done
