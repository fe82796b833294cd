#!/usr/bin/env bash
# Workers on separate hosts, as far as one machine can show it: WORKERS
# workers (default 3), each in a network namespace of its own with one veth
# link to a bridge, reach PostgreSQL and the fake provider over that network
# path (NET_DELAY_MS each way on every link, default 1, with tc netem), never
# over loopback. They share one batch of ROWS rows (default 3,000) under
# --global-cap CAP (default 6), each with -c CONC (default 4).
# Checks: the fake never held more than CAP calls at once; the export has
# every id exactly once, all success. Needs root (ip netns, tc) and socat
# (PostgreSQL listens on loopback only: socat relays the bridge's port to
# it, so its configuration is left alone).
#   sudo bench/queue_netns.sh [ROWS]
set -euo pipefail
rows=${1:-3000}
cap=${CAP:-6}; workers=${WORKERS:-3}; conc=${CONC:-4}; latency_ms=${LATENCY_MS:-20}; delay_ms=${NET_DELAY_MS:-1}
if [[ $(id -u) != 0 ]]; then echo "queue_netns.sh: needs root (ip netns, tc)" >&2; exit 2; fi
for t in ip tc socat; do
  command -v "$t" >/dev/null || { echo "queue_netns.sh: needs $t (Debian: apt-get install iproute2 socat)" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"

# Names carry the pid, so two runs never meet; all of it goes on exit.
tag=$$; br="hfbr$tag"; net=10.231.$((tag % 200)).0; host=${net%.0}.1
relay_pid=""
netns_cleanup() {
  [[ -n $relay_pid ]] && kill "$relay_pid" 2>/dev/null
  for i in $(seq "$workers"); do ip netns del "hfw$tag-$i" 2>/dev/null || true; ip link del "hfv$tag-$i" 2>/dev/null || true; done
  ip link del "$br" 2>/dev/null || true
  bench_cleanup
}
trap netns_cleanup EXIT

ip link add "$br" type bridge
ip addr add "$host/24" dev "$br"
ip link set "$br" up
for i in $(seq "$workers"); do
  ns="hfw$tag-$i"
  ip netns add "$ns"
  ip link add "hfv$tag-$i" type veth peer name eth0 netns "$ns"
  ip link set "hfv$tag-$i" master "$br" up
  ip -n "$ns" addr add "${net%.0}.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # The delay each way: on the worker's side for what it sends, on the
  # bridge's side for what it receives.
  if [[ $delay_ms != 0 ]] && ! { tc qdisc add dev "hfv$tag-$i" root netem delay "${delay_ms}ms" 2>/dev/null &&
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "${delay_ms}ms" 2>/dev/null; }; then
    echo "(this kernel has no netem: the links carry no added delay)"
    delay_ms=0
  fi
done

new_db
socat "TCP-LISTEN:15432,bind=$host,reuseaddr,fork" TCP:127.0.0.1:5432 &
relay_pid=$!
netdb="postgres://postgres@$host:15432/$db_name"
gen_csv "$rows" "$work/in.csv" "review"
"$work/hfsent" queue push "$work/in.csv" --db "$db" --batch netns --global-cap "$cap" --no-progress 2>/dev/null
start_fake -addr "$host:0" -latency "${latency_ms}ms"

start=$(date +%s.%N)
pids=()
for i in $(seq "$workers"); do
  ip netns exec "hfw$tag-$i" "$work/hfsent" worker --db "$netdb" --batch netns --endpoint "http://$(fake_addr)" \
    -c "$conc" --retries 0 --no-dedupe --exit-when-done --no-progress --log-level warn 2>"$work/w$i.log" &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
end=$(date +%s.%N)
stop_fake
[[ $fail == 0 ]] || { echo "a worker failed:" >&2; tail -n 3 "$work"/w*.log >&2; exit 1; }

"$work/hfsent" queue export --db "$db" --batch netns -o "$work/out.csv" 2>/dev/null
max=$(sed -n 's/.*max_in_flight=\([0-9]*\).*/\1/p' "$work/fake.log")
ids=$(tail -n +2 "$work/out.csv" | cut -d, -f1 | sort -u | wc -l)
ok=$(tail -n +2 "$work/out.csv" | grep -c ',success,' || true)
printf '%d workers in their own network namespaces (%d ms each way), -c %d each, --global-cap %d: %d rows in %.2fs\n' \
  "$workers" "$delay_ms" "$conc" "$cap" "$rows" "$(echo "$end - $start" | bc -l)"
printf 'fake provider: max_in_flight=%s (cap %d); export: %d distinct ids of %d, %d success\n' "$max" "$cap" "$ids" "$rows" "$ok"
[[ $max -le $cap && $ids == "$rows" && $ok == "$rows" ]] || { echo "FAIL" >&2; exit 1; }
echo "PASS"
