#!/usr/bin/env bash
# Two corvus broker builds alternated under `bench remoting` (single sends), for an A/B of a
# change on the remoting path:
#
#   bench/rocketmq-compare/ab.sh OLD_RELEASE_DIR NEW_RELEASE_DIR [ROUNDS] [BROKER_CONFIG]
#
# Each run starts the NameServer and the broker (from that directory, `--cores 1 --profile
# throughput`, plus `--config BROKER_CONFIG` if given) pinned to CPU 0 on fresh stores in a
# temporary directory, makes an 8-queue topic, and drives it from CPU 1 with NEW's `bench
# remoting`: 64 connections with one SEND_MESSAGE_V2 of 1 KiB in flight each and a puller per
# queue, 10 s warm-up, 20 s measured. One line a run: msg/s, RT p50/p99, broker CPU
# utilisation and CPU-seconds per million messages, and the driver's own CPU. Loopback only;
# every process it starts is stopped before the next run.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
OLD="$1" NEW="$2" ROUNDS="${3:-2}" CFG="${4:-}"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for ((i = 1; i <= ROUNDS; i++)); do
  for which in old new; do
    bin="$NEW"; [ "$which" = old ] && bin="$OLD"
    d=$(mktemp -d); ring=$(mktemp -d /dev/shm/corvus-ab.XXXX)
    ns=$(free_port); bp=$(free_port)
    taskset -c 0 "$NEW/namesrv" --listen "127.0.0.1:$ns" > "$d/ns.out" 2>&1 & nsp=$!; PIDS+=("$nsp")
    extra=(); [ -z "$CFG" ] || extra=(--config "$CFG")
    taskset -c 0 "$bin/broker" --cores 1 --profile throughput "${extra[@]}" --listen "127.0.0.1:$bp" \
      --namesrv "127.0.0.1:$ns" --data-dir "$d/data" --tail-ring-dir "$ring" > "$d/b.out" 2>&1 &
    bpid=$!; PIDS+=("$bpid")
    for _ in $(seq 1 100); do grep -q "broker listening" "$d/b.out" && break; sleep 0.2; done
    for _ in $(seq 1 60); do
      "$NEW/mqadmin" -n "127.0.0.1:$ns" update-topic -t BenchTopic -q 8 > /dev/null 2>&1 && break
      sleep 0.5
    done
    taskset -c 1 timeout 120 "$NEW/bench" remoting -n "127.0.0.1:$ns" -t BenchTopic --producers 64 \
      --inflight 1 --batch 1 --size 1024 --warmup 10 --duration 20 --broker-pid "$bpid" \
      > "$d/drv.out" 2>&1 || true
    grep '^RESULT ' "$d/drv.out" | sed 's/^RESULT //' | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$which $i: %d msg/s, RT p50 %.2f p99 %.2f ms, broker CPU %.0f%%, %.1f CPU-s per M, driver CPU %.0f%%' % (
    d['send_tps'], d['rt_p50_us'] / 1000, d['rt_p99_us'] / 1000, d['broker_cpu_util'] * 100,
    d['broker_cpu_s_per_M_sent'], d.get('driver_cpu_util', 0) * 100))"
    kill "$bpid" "$nsp" 2>/dev/null || true
    wait "$bpid" "$nsp" 2>/dev/null || true
    rm -rf "$d" "$ring"
  done
done
