#!/usr/bin/env bash
# A well-behaved client beside noisy neighbours, no quota configured: one broker core on CPU 0,
# a paced producer (`bench produce`, single 1 KiB sends at RATE/s) on CPU 1, alone and then
# beside each neighbour, which runs on CPU 1 under SCHED_IDLE so that the paced client's own CPU
# is not what is measured:
#   flood   tiny pipelined sends (`bench remoting`, 8 connections x 512 in flight, 64 B)
#   batches huge batches (`bench remoting`, 4 connections x 2 in flight, 256 x 12 KiB = 3 MiB)
#   idle    10,000 idle connections from another peer (127.0.0.2)
#   loopback  the control: loopback TCP traffic between sockets of its own (4 pairs writing
#           64 B at a time), touching no broker: what a neighbour's kernel work alone does to
#           the paced client on a CPU they share
#   bigloop the control for `batches`: 4 connections writing 3 MiB at a time, over loopback, to
#           a reader on the broker's CPU 0 under SCHED_IDLE: the kernel's part of moving huge
#           batches from CPU 1 to CPU 0, without the broker's
# NEIGHBOURS picks which of them run (default "flood batches idle").
# Prints one line per run: the paced client's rate, p50/p99/max send->ack and errors.
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
. "$(dirname "$0")/paced_lib.sh"
out=${OUT:-/tmp/neighbours}; rm -rf "$out"; mkdir -p "$out"
ulimit -n 20000

start_broker "$out" ${BROKER_ARGS:-}
"$MQADMIN" update-topic -n $NS -t Fair -q 4 > "$out/topic.log" 2>&1
wait_route Fair

paced() {
  taskset -c 1 "$B/bench" produce -n $NS -t Fair --batch 1 --size 1024 --rate "$RATE" \
    --inflight 64 --duration "$DURATION" --no-disk --floor-duration 0 --json > "$out/$1.json" 2> "$out/$1.err"
  summary "$1" "$out/$1.json"
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
for n in ${NEIGHBOURS:-flood batches idle}; do
  case $n in
    flood) neighbour flood "$B/bench" remoting -n $NS -t Fair --producers 8 --inflight 512 \
      --size 64 --no-consume --warmup 1 --duration $((DURATION + 8)) ;;
    batches) neighbour batches "$B/bench" remoting -n $NS -t Fair --producers 4 --inflight 2 \
      --batch 256 --size 12288 --no-consume --warmup 1 --duration $((DURATION + 8)) ;;
    idle) neighbour idle python3 "$ROOT/bench/scripts/hold_connections.py" 127.0.0.2 \
      $BROKER_ADDR 10000 $((DURATION + 8))
      grep -h "holding" "$out/idle-neighbour.log" ;;
    loopback) neighbour loopback python3 "$ROOT/bench/scripts/loopback_traffic.py" 4 64 \
      $((DURATION + 8)) ;;
    bigloop) neighbour bigloop python3 "$ROOT/bench/scripts/loopback_traffic.py" 4 3145728 \
      $((DURATION + 8)) 0 ;;
    *) echo "unknown neighbour $n (flood, batches, idle, loopback, bigloop)" >&2; exit 2 ;;
  esac
done
paced solo2
