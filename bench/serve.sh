#!/usr/bin/env bash
# hfsent serve under a real HTTP load (bench/loadgen: vegeta as a library,
# open loop, every text different), the fake provider at L = 20 ms, -c 64:
# the provider's capacity is C/L = 3200 requests/s.
#   1. 0.8 x capacity: throughput, p50/p99, server CPU per request
#      (goal: p99 within L + 5 ms, CPU under 0.1 ms a request);
#   2. 2 x capacity for 30 s: answered and rejected latency apart (goals:
#      answered p99 within 1.5 L, rejected p99 under --admission-wait +
#      10 ms), the most calls the provider held at once (never above -c),
#      the server's memory each second (flat);
#   3. the same 2 x with --batch-size 16: requests answered per second.
# Beside 1., bench/peerserve (the plainest Go service of the same route) under
# the same load gives the floor CPU per request on this machine; ONLY_0_8=1
# stops after those two runs.
# Everything runs on loopback on this machine, load generator included, so
# the figures are a floor for a machine of its own. CONC=16 gives a load
# this 2-core machine can generate, fake and serve at once (capacity 800/s).
#   bench/serve.sh [extra serve flags...]
set -euo pipefail
conc=${CONC:-64}; latency_ms=${LATENCY_MS:-20}; secs=${SECONDS_2X:-30}
source "$(dirname "$0")/lib.sh"
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/peerserve" ./bench/peerserve
# The fake under a name of its own, so that nothing stopping other
# benchmarks' fakes by name stops this one.
fake_bin=$work/serve-bench-fake
cp "$work/fakeprovider" "$fake_bin"

capacity=$((conc * 1000 / latency_ms))
serve_pid=""
trap '[[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null; bench_cleanup' EXIT

# start_server CMD...: a server (hfsent serve, or bench/peerserve) in the
# background, logging to serve.log; waits for its "listening" line and
# sets serve_pid and serve_addr.
start_server() {
  rm -f "$work/serve.log"
  "$@" 2>"$work/serve.log" &
  serve_pid=$!
  for _ in $(seq 100); do grep -q 'msg=listening' "$work/serve.log" 2>/dev/null && break; sleep 0.05; done
  serve_addr=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$work/serve.log")
}

# start_serve FLAGS...: hfsent serve on a free port, in front of the fake.
start_serve() {
  start_server "$work/hfsent" serve --addr 127.0.0.1:0 --endpoint "http://$(fake_addr)/models/{model}" -c "$conc" "$@"
}

# start_peer: bench/peerserve, the plainest Go service of the same route,
# in hfsent's place: the floor for CPU per request on this machine.
start_peer() { start_server "$work/peerserve" -upstream "http://$(fake_addr)/models/x" -c "$conc"; }

stop_serve() { kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""; }

# run NAME RATE DURATION SERVE_FLAGS...
run() {
  local name=$1 rate=$2 duration=$3; shift 3
  start_fake -latency "${latency_ms}ms"
  if [[ $name == peer* ]]; then
    start_peer
    echo "== $name: bench/peerserve -c $conc (fake provider ${latency_ms}ms; capacity $capacity/s)"
  else
    start_serve "$@"
    echo "== $name: hfsent serve -c $conc $* (fake provider ${latency_ms}ms; capacity $capacity/s)"
  fi
  "$work/loadgen" -url "http://$serve_addr" -rate "$rate" -duration "$duration" -pid "$serve_pid" -name "$name"
  stop_serve
  stop_fake
  sed -n 's/.*\(calls=[0-9]* max_in_flight=[0-9]*\).*/  provider: \1 (warm-up included)/p' "$work/fake.log"
}

run "0.8x capacity" $((capacity * 8 / 10)) 10s "$@"
run "peer, 0.8x capacity" $((capacity * 8 / 10)) 10s
[[ ${ONLY_0_8:-} ]] && exit 0
run "2x capacity" $((capacity * 2)) "${secs}s" "$@"
run "2x capacity, --batch-size 16" $((capacity * 2)) 10s --batch-size 16 "$@"
