#!/usr/bin/env bash
# Idempotent sends on and off, alternated: one broker core on CPU 0, `bench remoting` batches of
# 64 (each message with its UNIQ_KEY, as RocketMQ's clients send them) from CPU 1. Needs
# `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
# ROUNDS (default "1 2") and MODES (default "false true") choose the runs; CARGO_TARGET_DIR
# and MQADMIN the binaries, so builds can be compared.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${CARGO_TARGET_DIR:-$ROOT/target}/release
MQADMIN=${MQADMIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/mqadmin}
out=/tmp/dedup-ab; rm -rf $out; mkdir -p $out
for round in ${ROUNDS:-1 2}; do
for mode in ${MODES:-false true}; do
  d=$out/$mode-$round; mkdir -p $d
  printf 'dedup_enable = %s\n' $mode > $d/c.toml
  taskset -c 0 $B/namesrv --listen 127.0.0.1:29876 > $d/ns.log 2>&1 &
  NS=$!
  taskset -c 0 $B/broker --cores 1 --profile throughput --listen 127.0.0.1:29911 -n 127.0.0.1:29876 --data-dir $d/data --tail-ring-dir /dev/shm/dedupab-$mode-$round -c $d/c.toml > $d/broker.log 2>&1 &
  BR=$!
  for i in $(seq 1 100); do grep -q "listening" $d/broker.log && break; sleep 0.2; done
  sleep 2
  $MQADMIN update-topic -n 127.0.0.1:29876 -t DedupAB -q 8 > $d/topic.log 2>&1
  sleep 2
  taskset -c 1 $B/bench remoting -n 127.0.0.1:29876 -t DedupAB --batch 64 --producers 4 --inflight 4 --no-consume --warmup 5 --duration 15 --broker-pid $BR > $d/bench.log 2>&1
  echo "== dedup_enable=$mode round $round"; grep RESULT $d/bench.log
  kill $BR; wait $BR; kill $NS; wait $NS
  rm -rf $d/data /dev/shm/dedupab-$mode-$round
done
done
