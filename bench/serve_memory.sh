#!/usr/bin/env bash
# What request bodies can cost hfsent serve in memory: CALLERS (1,000)
# callers, each on its own connection, send 1 MiB /v1/classify bodies of 256
# items (within the defaults) as fast as they are answered, for SECS (20)
# seconds; then BIG_CALLERS (16) callers send 63 MB bodies to a server run
# with --max-body 64MiB; then the 1 MiB callers again beside SLOW (3,000)
# connections that each send 60 KB of headers and then nothing. The fake
# provider answers in 20 ms; serve runs with its defaults (-c 8). Prints the
# answers by status and the server's peak RSS (VmHWM), for this tree's build
# and, beside it in the same sitting, BASE's (default main: the build before
# --body-budget and --max-conns).
#   bench/serve_memory.sh [extra serve flags...]
set -euo pipefail
callers=${CALLERS:-1000}; big_callers=${BIG_CALLERS:-16}; slow=${SLOW:-3000}; secs=${SECS:-20}; base=${BASE:-main}
source "$(dirname "$0")/lib.sh"
go build -o "$work/bodyflood" ./bench/bodyflood
fake_bin=$work/memory-bench-fake
cp "$work/fakeprovider" "$fake_bin"
# The build to compare with, from git (no work tree is touched).
mkdir "$work/base"
git archive "$base" | tar -x -C "$work/base"
(cd "$work/base" && go build -o "$work/hfsent-base" ./cmd/hfsent)
ulimit -n 65536 2>/dev/null || true

serve_pid=""
trap '[[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null; bench_cleanup' EXIT

start_serve() { # BIN FLAGS...
  local bin=$1; shift
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  serve_addr=127.0.0.1:$port
  # Access logs off: 1,000 callers would spend the machine on them.
  "$bin" serve --addr "$serve_addr" --endpoint "http://$(fake_addr)/models/{model}" --log-level warn "$@" 2>"$work/serve.log" &
  serve_pid=$!
  for _ in $(seq 200); do curl -sf "http://$serve_addr/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
}

stop_serve() { kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""; }

run() { # NAME BIN CALLERS BODY SLOW FLAGS...
  local name=$1 bin=$2 n=$3 body=$4 slow_conns=$5; shift 5
  start_fake -latency 20ms
  start_serve "$bin" "$@"
  "$work/bodyflood" -url "http://$serve_addr" -callers "$n" -body "$body" -items 256 -slow "$slow_conns" -duration "${secs}s" -pid "$serve_pid" -name "$name"
  stop_serve
  stop_fake
}

for build in base this; do
  bin=$work/hfsent; [[ $build == base ]] && bin=$work/hfsent-base
  echo "== $build ($([[ $build == base ]] && echo "$base" || git rev-parse --short HEAD)): $callers callers, 1 MiB bodies, defaults"
  run "$build, 1 MiB" "$bin" "$callers" 1048576 0 "$@"
  echo "== $build: $big_callers callers, 63 MB bodies, --max-body 64MiB"
  run "$build, 63 MB" "$bin" "$big_callers" 63000000 0 --max-body 64MiB "$@"
  echo "== $build: $callers callers, 1 MiB bodies, and $slow slow connections"
  run "$build, 1 MiB + slow" "$bin" "$callers" 1048576 "$slow" "$@"
done
