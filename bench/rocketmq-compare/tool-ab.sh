#!/usr/bin/env bash
# RocketMQ's benchmark Producer (64 synchronous senders, 1 KiB) against one corvus broker
# core, two broker configs in turn, for an A/B of a setting under RocketMQ's own load:
#
#   bench/rocketmq-compare/tool-ab.sh RELEASE_DIR ROUNDS 'TOML A' 'TOML B'
#
# e.g. `tool-ab.sh target/release 6 'idle_poll_us = 200' 'idle_poll_us = 0'`. RELEASE_DIR
# holds broker, namesrv and mqadmin (`cargo build --release -p broker -p namesrv -p mqadmin`),
# and the tools must have been compiled into target/rocketmq-compare by
# `run.sh --driver tools --rocketmq-src DIR`.
# Each run starts the NameServer and the broker (`--cores 1 --profile throughput` with that
# TOML) pinned to CPU 0 on fresh stores, makes an 8-queue topic, runs the Producer on CPU 1
# for 12 s of warm-up and 8 s measured, and prints one line: the tool's last sends a second
# and the broker's CPU-seconds per million messages over the 8 s (from /proc/PID/stat).
# Loopback only; every process it starts is stopped before the next run.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,16p' "$0"; exit 2; }
BIN="$1" ROUNDS="$2" A="$3" B="$4"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/target/rocketmq-compare"
[ -d "$BUILD/classes-tools" ] || { echo "no $BUILD/classes-tools: run run.sh --driver tools first" >&2; exit 1; }
CP="$BUILD/classes-tools:$BUILD/classes:$(cat "$BUILD/cp.txt")"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for ((i = 1; i <= ROUNDS; i++)); do
  for which in A B; do
    toml="$A"; [ "$which" = B ] && toml="$B"
    d=$(mktemp -d); ring=$(mktemp -d /dev/shm/corvus-tool-ab.XXXX)
    ns=$(free_port); bp=$(free_port)
    taskset -c 0 "$BIN/namesrv" --listen "127.0.0.1:$ns" > "$d/ns.out" 2>&1 & nsp=$!; PIDS+=("$nsp")
    echo "$toml" > "$d/broker.toml"
    taskset -c 0 "$BIN/broker" --cores 1 --profile throughput --config "$d/broker.toml" \
      --listen "127.0.0.1:$bp" --namesrv "127.0.0.1:$ns" --data-dir "$d/data" \
      --tail-ring-dir "$ring" > "$d/b.out" 2>&1 &
    bpid=$!; PIDS+=("$bpid")
    for _ in $(seq 1 100); do grep -q "broker listening" "$d/b.out" && break; sleep 0.2; done
    "$BIN/mqadmin" update-topic -n "127.0.0.1:$ns" -t BenchTopic -q 8 > /dev/null
    ROCKETMQ_HOME="$d" taskset -c 1 java -Xms2g -Xmx2g -XX:+UseG1GC -Duser.home="$d" -cp "$CP" \
      org.apache.rocketmq.example.benchmark.Producer -n "127.0.0.1:$ns" -t BenchTopic \
      -w 64 -s 1024 -ri 1000 > "$d/tool.out" 2>&1 &
    tpid=$!; PIDS+=("$tpid")
    sleep 12
    c0=$(ticks "$bpid"); sleep 8; c1=$(ticks "$bpid")
    kill "$tpid"; wait "$tpid" 2>/dev/null || true
    tps=$(grep -o 'Send TPS: [0-9]*' "$d/tool.out" | tail -1 | awk '{print $3}' || true)
    python3 -c "import sys; t=int(sys.argv[2]); c=(int(sys.argv[4])-int(sys.argv[3]))/100
cost = f'{c/(t*8)*1e6:.2f} CPU-s per M' if t else 'no sends reported'
print(f'round {sys.argv[5]} {sys.argv[1]}: {t} sends/s, broker {cost}')" \
      "$which ($toml)" "${tps:-0}" "$c0" "$c1" "$i"
    kill "$bpid" "$nsp"; wait "$bpid" "$nsp" 2>/dev/null || true
    rm -rf "$d" "$ring"
  done
done
