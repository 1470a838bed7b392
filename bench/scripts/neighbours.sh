#!/usr/bin/env bash
# A well-behaved client beside noisy neighbours, no quota configured: one broker core on CPU 0,
# a paced producer (`bench produce`, single 1 KiB sends at RATE/s) on CPU 1, alone and then
# beside each neighbour, which runs on CPU 1 under SCHED_IDLE so that the paced client's own CPU
# is not what is measured:
#   flood   tiny pipelined sends (`bench remoting`, 8 connections x 512 in flight, 64 B)
#   batches huge batches (`bench remoting`, 4 connections x 2 in flight, 256 x 12 KiB = 3 MiB)
#   idle    10,000 idle connections from another peer (127.0.0.2)
# Prints one line per run: the paced client's rate, p50/p99/max send->ack and errors.
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${CARGO_TARGET_DIR:-$ROOT/target}/release
MQADMIN=${MQADMIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/mqadmin}
RATE=${RATE:-2000}
DURATION=${DURATION:-15}
NS=127.0.0.1:29876
out=${OUT:-/tmp/neighbours}; rm -rf "$out"; mkdir -p "$out"
ulimit -n 20000

taskset -c 0 "$B/namesrv" --listen $NS > "$out/ns.log" 2>&1 &
NSPID=$!
taskset -c 0 "$B/broker" --cores 1 --listen 127.0.0.1:29911 -n $NS --data-dir "$out/data" \
  --tail-ring-dir /dev/shm/neighbours ${BROKER_ARGS:-} > "$out/broker.log" 2>&1 &
BR=$!
trap 'kill $BR $NSPID 2>/dev/null; wait; rm -rf "$out/data" /dev/shm/neighbours' EXIT
for _ in $(seq 1 100); do grep -q "listening" "$out/broker.log" && break; sleep 0.2; done
"$MQADMIN" update-topic -n $NS -t Fair -q 4 > "$out/topic.log" 2>&1
for _ in $(seq 1 50); do "$MQADMIN" topic-route -n $NS -t Fair > /dev/null 2>&1 && break; sleep 0.2; done

paced() {
  taskset -c 1 "$B/bench" produce -n $NS -t Fair --batch 1 --size 1024 --rate "$RATE" \
    --inflight 64 --duration "$DURATION" --no-disk --floor-duration 0 --json > "$out/$1.json" 2> "$out/$1.err"
  python3 - "$1" "$out/$1.json" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[2]) if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {}
l = r.get("latency_us", {})
print(f"{sys.argv[1]:8} msgs/s {r.get('msgs_per_sec', 0):>8.0f}  send->ack p50 {l.get('p50', 0) / 1e3:.3f}"
      f"  p99 {l.get('p99', 0) / 1e3:.3f}  max {l.get('max', 0) / 1e3:.1f} ms  errors {r.get('errors', 'none reported')}")
PY
}

neighbour() {
  local name=$1; shift
  taskset -c 1 chrt --idle 0 "$@" > "$out/$name-neighbour.log" 2>&1 &
  local pid=$!
  sleep 3
  paced "$name"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

paced solo
neighbour flood "$B/bench" remoting -n $NS -t Fair --producers 8 --inflight 512 --size 64 \
  --no-consume --warmup 1 --duration $((DURATION + 8))
neighbour batches "$B/bench" remoting -n $NS -t Fair --producers 4 --inflight 2 --batch 256 \
  --size 12288 --no-consume --warmup 1 --duration $((DURATION + 8))
neighbour idle python3 "$ROOT/bench/scripts/hold_connections.py" 127.0.0.2 127.0.0.1:29911 \
  10000 $((DURATION + 8))
grep -h "holding" "$out/idle-neighbour.log"
paced solo2
