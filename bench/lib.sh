# Shared set-up for the benchmark scripts; source it from bench/*.sh.
# It builds hfsent (or copies $HFSENT_BIN) and the fake provider into $work,
# removes $work and stops the fake on exit, and offers:
#   gen_csv N FILE [TEXT]   N rows "r<i>,<TEXT> <i>" under a header
#   start_fake FLAGS...     runs bench/fakeprovider; its address is $(fake_addr)
#   stop_fake
#   new_db                  creates a PostgreSQL database for the run (on
#                           $HFSENT_BENCH_DATABASE_URL, default the local
#                           server as user postgres), sets $db to its URL,
#                           and drops it on exit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/local/go/bin"
work=$(mktemp -d)
# The runs' default response cache (and anything else under the user's
# cache directory) lives in $work, not in ~/.cache/hfsent: runs stay
# apart, and an earlier build (HFSENT_BIN, BASE_BIN) never meets a cache
# file that a later one upgraded to a format it refuses.
export XDG_CACHE_HOME="$work/cache-home"
fake_pid=""
db=""
db_name=""
bench_cleanup() {
  [[ -n $fake_pid ]] && kill "$fake_pid" 2>/dev/null
  [[ -n $db_name ]] && psql "$db_admin" -qc "drop database if exists $db_name with (force)" >/dev/null 2>&1
  rm -rf "$work"
}
trap bench_cleanup EXIT

# HFSENT_BIN runs another build of hfsent (an earlier commit's, to compare
# before and after in one sitting); by default this tree is built.
if [[ -n ${HFSENT_BIN:-} ]]; then
  cp "$HFSENT_BIN" "$work/hfsent"
else
  go build -o "$work/hfsent" ./cmd/hfsent
fi
go build -o "$work/fakeprovider" ./bench/fakeprovider

gen_csv() {
  awk -v n="$1" -v text="${3:-review}" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "r%d,\"%s %d\"\n", i, text, i }' >"$2"
}

# fake_bin, when set, runs the fake under another name (bench/serve.sh: so
# that nothing stopping other benchmarks' fakes by name stops its own).
start_fake() {
  rm -f "$work/addr"
  "${fake_bin:-$work/fakeprovider}" -addr-file "$work/addr" "$@" 2>"$work/fake.log" &
  fake_pid=$!
  for _ in $(seq 100); do [[ -s $work/addr ]] && break; sleep 0.05; done
}

stop_fake() { kill "$fake_pid"; wait "$fake_pid" 2>/dev/null || true; fake_pid=""; }

fake_addr() { cat "$work/addr"; }

db_admin=${HFSENT_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
new_db() {
  db_name="hfsent_bench_$$"
  psql "$db_admin" -qc "create database $db_name" >/dev/null
  db="${db_admin%/*}/$db_name"
}

# pg_cpu_ticks prints the CPU (clock ticks, user+system) the local
# PostgreSQL server has used so far: the postmaster, its live children and
# the children it reaped (exited backends). Empty when the server is not
# on this machine. A delta of two readings is the server's CPU in between.
pg_cpu_ticks() {
  local dir pm
  dir=$(psql "$db_admin" -Atc "show data_directory" 2>/dev/null) || return 0
  # postmaster.pid's first line is the postmaster's PID.
  pm=$(head -n 1 "$dir/postmaster.pid" 2>/dev/null) || return 0
  [[ -n $pm && -r /proc/$pm/stat ]] || return 0
  {
    sed 's/^.*) //' "/proc/$pm/stat" | awk '{ print $12 + $13 + $14 + $15 }'
    for c in $(cat /proc/$pm/task/*/children 2>/dev/null); do
      # A backend may exit between the listing and the read.
      sed 's/^.*) //' "/proc/$c/stat" 2>/dev/null | awk '{ print $12 + $13 }' || true
    done
  } | awk '{ s += $1 } END { print s }'
}
