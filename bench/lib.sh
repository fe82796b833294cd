# Shared set-up for the benchmark scripts; source it from bench/*.sh.
# It builds hfsent (or copies $HFSENT_BIN) and the fake provider into $work,
# removes $work and stops the fake on exit, and offers:
#   gen_csv N FILE [TEXT]   N rows "r<i>,<TEXT> <i>" under a header
#   start_fake FLAGS...     runs bench/fakeprovider; its address is $(fake_addr)
#   stop_fake
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/local/go/bin"
work=$(mktemp -d)
fake_pid=""
trap '[[ -n $fake_pid ]] && kill "$fake_pid" 2>/dev/null; rm -rf "$work"' EXIT

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

start_fake() {
  rm -f "$work/addr"
  "$work/fakeprovider" -addr-file "$work/addr" "$@" 2>"$work/fake.log" &
  fake_pid=$!
  for _ in $(seq 100); do [[ -s $work/addr ]] && break; sleep 0.05; done
}

stop_fake() { kill "$fake_pid"; wait "$fake_pid" 2>/dev/null || true; fake_pid=""; }

fake_addr() { cat "$work/addr"; }
