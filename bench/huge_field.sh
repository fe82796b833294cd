#!/usr/bin/env bash
# Peak memory of classify and queue push on a CSV with one huge field:
# FIELD_MB (1000) MB of text in one row, and (second file) an unclosed quote
# that swallows FIELD_MB MB to the end of the file. Runs this tree's build
# and, beside it, BASE's (default main: the reader before fields were cut
# while read). Prints exit code, peak RSS (GNU time) and the outcome; push
# runs when PostgreSQL is there (HFSENT_BENCH_DATABASE_URL, default the
# local server).
#   bench/huge_field.sh
set -euo pipefail
mb=${FIELD_MB:-1000}; base=${BASE:-main}
[[ -x /usr/bin/time ]] || { echo "needs GNU time: apt-get install -y time" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
mkdir "$work/base"
git archive "$base" | tar -x -C "$work/base"
(cd "$work/base" && go build -o "$work/hfsent-base" ./cmd/hfsent)

# field FILE OPEN CLOSE: a row whose text is $mb MB, between two short rows.
field() {
  { printf 'request_id,text\nr1,a short and fine text\nr2,%s' "$2"
    head -c $((mb << 20)) /dev/zero | tr '\0' 'x'
    printf '%s\nr3,another fine text\n' "$3"; } >"$1"
}
field "$work/field.csv" '"' '"'
field "$work/unclosed.csv" '"oops' ''

db_ok=""
if psql "$db_admin" -qc 'select 1' >/dev/null 2>&1; then new_db; db_ok=1; fi

measure() { # LABEL CMD...: exit code and peak RSS
  local label=$1; shift
  local rc=0
  /usr/bin/time -v "$@" >"$work/out" 2>"$work/err" || rc=$?
  printf '%-44s exit %d  peak RSS %6.0f MiB  %s\n' "$label" "$rc" \
    "$(awk -F': ' '/Maximum resident set size/ { print $2 / 1024 }' "$work/err")" \
    "$(grep -v -e '^\s' -e 'Command being timed' "$work/err" | grep -m1 -E 'hfsent:|rows|batch' | cut -c1-110)"
}

for build in base this; do
  bin=$work/hfsent; [[ $build == base ]] && bin=$work/hfsent-base
  measure "$build: classify, one $mb MB field" "$bin" classify "$work/field.csv" --provider local -o "$work/res-$build.csv" --no-progress
  measure "$build: classify, unclosed quote over $mb MB" "$bin" classify "$work/unclosed.csv" --provider local -o "$work/res2-$build.csv" --no-progress
  if [[ $db_ok ]]; then
    measure "$build: queue push, one $mb MB field" "$bin" queue push "$work/field.csv" --db "$db" --batch "f$build" --no-progress
    measure "$build: queue push -, unclosed quote" sh -c "exec \"$bin\" queue push - --db \"$db\" --batch u$build --no-progress <\"$work/unclosed.csv\""
    echo "  batches in the database, with the characters of text stored: $(psql "$db" -Atc "select string_agg(b.name || '=' || coalesce((select sum(length(text)) from hfsent.input i where i.batch_id = b.id), 0), ' ' order by b.id) from hfsent.batch b" 2>/dev/null)"
  fi
done
