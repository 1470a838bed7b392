#!/usr/bin/env bash
# Producers beside a consumer catching up from disk: one broker core on CPU 0, the clients on
# CPU 1. A backlog of FILL single 1 KiB sends to a 16-queue topic (each producer sends to the
# queues in turn, as RocketMQ's producers do, so the queues interleave in the log record by
# record), then single sends paced at PRODUCE_RATE/s for PACED_DURATION s while `bench consume`
# reads the whole backlog from each queue's first offset.
# Prints the paced producer's rate, p50/p99/max send->ack and errors, the consumer's line,
# the broker's SYSTEM_BUSY refusals (`mqadmin broker-status`), and per-second disk reads and writes of the data disk
# (from /proc/diskstats) over the paced run: "reads/s MB/s | writes/s MB/s in-flight".
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
. "$(dirname "$0")/paced_lib.sh"
out=${OUT:-/tmp/catchup}; rm -rf "$out"; mkdir -p "$out"
FILL=${FILL:-3000000}
PRODUCE_RATE=${PRODUCE_RATE:-100000}
PACED_DURATION=${PACED_DURATION:-15}

start_broker "$out" --profile throughput ${BROKER_ARGS:-}
"$MQADMIN" update-topic -n $NS -t CatchUp -q 16 > "$out/topic.log" 2>&1
wait_route CatchUp

dev=$(basename "$(df --output=source "$out" | tail -1)")
python3 - "$dev" > "$out/disk.log" <<'PY' &
import sys, time
dev = sys.argv[1]
def sample():
    for line in open("/proc/diskstats"):
        f = line.split()
        if f[2] == dev:
            return [int(x) for x in f[3:]]
    return None
prev = sample()
while prev is not None:
    time.sleep(1)
    cur = sample()
    d = [a - b for a, b in zip(cur, prev)]
    prev = cur
    print(f"reads/s {d[0]:6d} {d[2] * 512 / 1e6:7.1f} MB/s | writes/s {d[4]:5d} "
          f"{d[6] * 512 / 1e6:6.1f} MB/s in-flight {cur[8]}", flush=True)
PY
DISK=$!

taskset -c 1 "$B/bench" produce -n $NS -t CatchUp --batch 1 --inflight 256 --producers 4 \
  --messages "$FILL" --no-disk --floor-duration 0 --json > "$out/fill.json" 2> "$out/fill.err"
summary fill "$out/fill.json"
lines_before=$(wc -l < "$out/disk.log")
taskset -c 1 "$B/bench" consume -n $NS -t CatchUp --no-disk --json > "$out/consume.json" 2> "$out/consume.err" &
CONSUMER=$!
taskset -c 1 "$B/bench" produce -n $NS -t CatchUp --batch 1 --inflight 256 --producers 4 \
  --rate "$PRODUCE_RATE" --duration "$PACED_DURATION" --no-disk --floor-duration 0 --json > "$out/paced.json" 2> "$out/paced.err"
summary paced "$out/paced.json"
lines_after=$(wc -l < "$out/disk.log")
wait $CONSUMER
python3 - "$out/consume.json" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {}
l = r.get("latency_us", {})
print(f"consume      msgs/s {r.get('msgs_per_sec', 0):>8.0f}  MB/s {r.get('mb_per_sec', 0):.1f}"
      f"  pull p50 {l.get('p50', 0) / 1e3:.1f}  p99 {l.get('p99', 0) / 1e3:.1f} ms  errors {r.get('errors', '?')}")
PY
kill $DISK 2>/dev/null
echo "broker $("$MQADMIN" broker-status -n $NS -b $BROKER_ADDR | grep -o 'busy_refusals=[0-9]*')"
echo "disk during the paced run:"
sed -n "$((lines_before + 1)),${lines_after}p" "$out/disk.log"
