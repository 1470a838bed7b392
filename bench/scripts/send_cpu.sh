#!/usr/bin/env bash
# The broker's CPU and io_uring work per single send: `bench produce` paces single 1 KiB sends
# (default 20,000/s) at a local one-core broker (CPU 0, the bench on CPU 1), and `perf stat`
# counts the broker's task-clock, io_uring_enter calls and io_uring operations for 4 s in the
# middle of the run. Needs perf and `cargo build --release -p bench`.
# Usage: send_cpu.sh [BENCH_BINARY...]: each binary in turn, ROUNDS times (default 3), so two
# builds can be compared run by run. RATE sets the pace.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RATE=${RATE:-20000}
[ $# -gt 0 ] || set -- "${CARGO_TARGET_DIR:-$ROOT/target}/release/bench"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for bench in "$@"; do
    "$bench" produce --batch 1 --rate "$RATE" --inflight 256 --duration 10 --no-disk \
      --floor-duration 0 --json > /dev/null 2>&1 &
    run=$!
    broker=""
    for _ in $(seq 1 100); do
      broker=$(pgrep -f "$bench __broker" | head -1)
      [ -n "$broker" ] && break
      sleep 0.1
    done
    [ -n "$broker" ] || { echo "no broker started by $bench" >&2; wait $run; continue; }
    sleep 4
    perf stat -x, -e task-clock,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req \
      -p "$broker" -- sleep 4 2>&1 |
      awk -F, -v tag="round $round $bench" -v n=$((RATE * 4)) '
        /task-clock/ { cpu = $1 * 1000 / n }
        /io_uring_enter/ { enters = $1 / n }
        /submit_req/ { ops = $1 / n }
        END { printf "%s: broker CPU %.2f us, io_uring_enter %.2f, io_uring operations %.2f per message\n", tag, cpu, enters, ops }'
    wait $run
  done
done
