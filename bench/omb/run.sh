#!/usr/bin/env bash
# The OpenMessaging Benchmark (openmessaging/benchmark, its driver-rocketmq, unchanged) against
# Apache RocketMQ 5.3.3 and corvus on this machine.
#
#   bench/omb/run.sh OMB_CHECKOUT [--runs N] [--rate MSGS] [--warmup MIN] [--duration MIN]
#                    [--workloads fixed,max] [--brokers rocketmq,corvus] [--batch-cq]
#                    [--heap SIZE] [--out DIR] [--rebuild] [--no-build]
#
# OMB_CHECKOUT: a clone of github.com/openmessaging/benchmark. Its HEAD is copied to
# $CARGO_TARGET_DIR/omb/src and built there with Maven (benchmark-framework, driver-api,
# driver-rocketmq; trim_pom.py drops the framework's other driver dependencies), once: the build
# is reused while the checkout's HEAD stays the same (--rebuild forces it). --no-build: use the
# corvus release binaries already built.
# Workloads, both made from the checkout's own files with the durations set by --warmup and
# --duration (whole minutes, OMB's unit; default 1 and 1):
#   fixed: workloads/1-topic-16-partitions-1kb.yaml with producerRate --rate (default 10000)
#   max:   workloads/max-rate-1-topic-16-partitions-1kb.yaml (producerRate 0: OMB's rate
#          controller looks for the highest rate the consumers keep up with)
# The driver config is driver-rocketmq/rocketmq.yaml with namesrvAddr set to the run's
# NameServer and batchCQ false (corvus keeps SimpleCQ consume queues only; --batch-cq keeps
# the file's true, which corvus refuses at topic creation). autoBatch stays as the file has it.
# Each broker (and its NameServer) is pinned to CPU 0, OMB (its workers in-process: local
# mode, no --workers) to CPU 1; runs alternate rocketmq, corvus, rocketmq, corvus, ... on fresh
# stores, inside a network namespace of their own with the loopback device only.
# See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
COMPARE="$ROOT/bench/rocketmq-compare"
RUNS=1
RATE=10000
WARMUP=1
DURATION=1
WORKLOADS=fixed,max
BROKERS=rocketmq,corvus
BATCH_CQ=false
HEAP=2g
OUT=""
REBUILD=0
CARGO_BUILD=1
INNER=0
OMB=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --brokers) BROKERS="$2"; shift 2 ;;
    --batch-cq) BATCH_CQ=true; shift ;;
    --heap) HEAP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --rebuild) REBUILD=1; shift ;;
    --no-build) CARGO_BUILD=0; shift ;;
    --inner) INNER=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) [ -z "$OMB" ] || { echo "one OMB_CHECKOUT only" >&2; exit 2; }; OMB="$1"; shift ;;
  esac
done
[ -n "$OMB" ] && [ -f "$OMB/driver-rocketmq/rocketmq.yaml" ] || {
  echo "usage: $0 OMB_CHECKOUT [options]: a clone of github.com/openmessaging/benchmark" >&2; exit 2; }
OMB="$(cd "$OMB" && pwd)"
for w in ${WORKLOADS//,/ }; do
  case "$w" in fixed|max) ;; *) echo "--workloads: fixed and/or max" >&2; exit 2 ;; esac
done
for b in ${BROKERS//,/ }; do
  case "$b" in rocketmq|corvus) ;; *) echo "--brokers: rocketmq and/or corvus" >&2; exit 2 ;; esac
done
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/release"
BUILD="$TARGET/omb"

if [ "$INNER" = 0 ]; then
  # --- Preparation, with the network: OMB and RocketMQ from Maven Central, corvus. ---
  [ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (broker on 0, OMB on 1)" >&2; exit 1; }
  command -v java >/dev/null && command -v mvn >/dev/null || { echo "needs java and mvn" >&2; exit 1; }
  mkdir -p "$BUILD" "$TARGET/rocketmq-compare"
  # OMB is built from a copy of the checkout's HEAD in $BUILD/src, with benchmark-framework's
  # dependencies trimmed to driver-api and driver-rocketmq (trim_pom.py says why); its sources
  # are OMB's, unchanged. The build is kept while the checkout's HEAD stays the same.
  head=$(git -C "$OMB" rev-parse HEAD)
  if [ "$REBUILD" = 1 ] || [ "$(cat "$BUILD/omb-head" 2>/dev/null)" != "$head" ] ||
     [ ! -s "$BUILD/src/benchmark-framework/target/classpath.txt" ]; then
    echo "== building OMB $head: benchmark-framework, driver-api, driver-rocketmq (Maven)"
    rm -rf "$BUILD/src" "$BUILD/omb-head"
    mkdir -p "$BUILD/src"
    git -C "$OMB" archive HEAD | tar -x -C "$BUILD/src"
    python3 "$HERE/trim_pom.py" "$BUILD/src/benchmark-framework/pom.xml"
    (cd "$BUILD/src" && timeout 3600 mvn -q -B -DskipTests -Dspotless.skip -Dlicense.skip \
       -Dspotbugs.skip -Dcheckstyle.skip -Djacoco.skip -pl benchmark-framework -am package)
    echo "$head" > "$BUILD/omb-head"
  fi
  if [ ! -s "$TARGET/rocketmq-compare/cp.txt" ] || [ "$COMPARE/pom.xml" -nt "$TARGET/rocketmq-compare/cp.txt" ]; then
    echo "== fetching Apache RocketMQ 5.3.3 (namesrv, broker, tools) from Maven Central"
    (cd "$COMPARE" && timeout 900 mvn -q -B dependency:build-classpath \
       -Dmdep.outputFile="$TARGET/rocketmq-compare/cp.txt")
  fi
  if [ "$CARGO_BUILD" = 1 ]; then
    echo "== building corvus (release: broker, namesrv)"
    (cd "$ROOT" && nice -n 10 cargo build --release -q -p broker -p namesrv)
  fi
  OMB_HEAD="$head"
  [ -n "$OUT" ] || OUT="$BUILD/results-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT/workloads"
  OUT="$(cd "$OUT" && pwd)"
  # The workloads: OMB's files, with this run's rate and durations.
  set_keys() { # SRC DST RATE: producerRate (unless empty), warm-up and test minutes
    grep -v -E '^(producerRate|testDurationMinutes|warmupDurationMinutes):' "$1" > "$2"
    [ -z "$3" ] || echo "producerRate: $3" >> "$2"
    printf 'warmupDurationMinutes: %s\ntestDurationMinutes: %s\n' "$WARMUP" "$DURATION" >> "$2"
  }
  set_keys "$BUILD/src/workloads/1-topic-16-partitions-1kb.yaml" "$OUT/workloads/fixed.yaml" "$RATE"
  set_keys "$BUILD/src/workloads/max-rate-1-topic-16-partitions-1kb.yaml" "$OUT/workloads/max.yaml" ""
  {
    echo "commit $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- . ':!BENCHMARKS.md' || echo ' (dirty)')"
    echo "omb ${OMB_HEAD:0:7} ($(git -C "$OMB" log -1 --format=%s "$OMB_HEAD" | cut -c1-60))"
    echo "omb rocketmq client $(tr ':' '\n' < "$BUILD/src/benchmark-framework/target/classpath.txt" | grep -o 'rocketmq-client-[0-9][0-9.]*[0-9]' | head -1)"
    grep -m1 'model name' /proc/cpuinfo
    echo "cpus $(nproc); $(uname -sr); $(java -version 2>&1 | head -1)"
    echo "rocketmq $(grep -o 'rocketmq-broker/[0-9.]*' "$TARGET/rocketmq-compare/cp.txt" | head -1)"
    echo "workloads: fixed ${RATE} msg/s, max rate; warm-up ${WARMUP} min, measured ${DURATION} min; batchCQ $BATCH_CQ"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } | tee "$OUT/machine.txt"
  export CARGO_TARGET_DIR="$TARGET"
  ARGS=("$OMB" --runs "$RUNS" --rate "$RATE" --warmup "$WARMUP" --duration "$DURATION"
        --workloads "$WORKLOADS" --brokers "$BROKERS" --heap "$HEAP" --out "$OUT")
  [ "$BATCH_CQ" = false ] || ARGS+=(--batch-cq)
  # Only loopback from here on.
  exec unshare -n -- bash -c 'ip link set lo up && exec bash "$0" --inner "$@"' "$0" "${ARGS[@]}"
fi

# --- Inside the network namespace: the runs. ---
CP="$(cat "$TARGET/rocketmq-compare/cp.txt")"
SRC="$BUILD/src"
OMB_CP="$SRC/benchmark-framework/target/classes:$(cat "$SRC/benchmark-framework/target/classpath.txt")"
TMP="$(mktemp -d /tmp/omb-run.XXXXXX)"
SHM="$(mktemp -d /dev/shm/omb-run.XXXXXX)"
PIDS=()
FLUSH=async
IDLE_POLL=""
# shellcheck source=../rocketmq-compare/brokers.sh
. "$COMPARE/brokers.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_registered NSPORT: a broker of DefaultCluster is in the NameServer's cluster table (the
# address it registers is its core's, not --listen's, for corvus).
wait_registered() {
  local try
  for ((try = 1; try <= 60; try++)); do
    mqadmin clusterList -n "127.0.0.1:$1" 2>/dev/null | grep -q '^DefaultCluster ' && return 0
    sleep 1
  done
  echo "no broker of DefaultCluster registered with the NameServer on $1" >&2; return 1
}

# one_run KIND N WORKLOAD: one OMB run of WORKLOAD (fixed or max) against a fresh KIND broker.
one_run() {
  local kind="$1" n="$2" wl="$3" dir="$TMP/$1-$2-$3" nsport port load0 load1 rc=0
  nsport=$(free_port); port=$(free_port)
  mkdir -p "$dir"
  disk_ok
  echo "== run $n: $kind, workload $wl (load $(cut -d' ' -f1 /proc/loadavg))"
  if [ "$kind" = rocketmq ]; then start_rocketmq "$dir" "$nsport" "$port"; else start_corvus "$dir" "$nsport" "$port"; fi
  wait_registered "$nsport"
  # OMB's driver config for RocketMQ, pointed at this run's NameServer.
  sed -e "s/^namesrvAddr:.*/namesrvAddr: 127.0.0.1:$nsport/" \
      -e "s/^batchCQ:.*/batchCQ: $BATCH_CQ/" "$SRC/driver-rocketmq/rocketmq.yaml" > "$dir/rocketmq.yaml"
  local json="$OUT/$wl-$kind-$n.json"
  load0=$(cut -d' ' -f1 /proc/loadavg)
  # OMB resolves the workload's payloadFile against its working directory: its sources.
  (cd "$SRC" && ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout $(((WARMUP + DURATION) * 60 + 300)) \
     java -server -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -Duser.home="$dir/omb" \
     -Drocketmq.client.logRoot="$dir/omb/logs" -cp "$OMB_CP" io.openmessaging.benchmark.Benchmark \
     --drivers "$dir/rocketmq.yaml" --output "$json" "$OUT/workloads/$wl.yaml") \
     > "$OUT/omb-$wl-$kind-$n.log" 2>&1 || rc=$?
  load1=$(cut -d' ' -f1 /proc/loadavg)
  stop_pid "$BROKER_PID"; stop_pid "$NS_PID"
  # The broker's own log, kept beside the results: what it said while refusing sends.
  cp "$dir/broker.out" "$OUT/broker-$wl-$kind-$n.out" 2>/dev/null || true
  if [ -s "$json" ]; then
    python3 - "$json" "$kind" "$n" "$wl" "$load0" "$load1" <<'PY'
import json, sys
path, kind, n, wl, l0, l1 = sys.argv[1:]
d = json.load(open(path))
d["corvus"] = dict(broker=kind, run=int(n), workload=wl, load_before=float(l0), load_after=float(l1))
json.dump(d, open(path, "w"), indent=1)
PY
    grep -E 'Pub rate|Aggregated' "$OUT/omb-$wl-$kind-$n.log" | tail -3 || true
  else
    echo "OMB wrote no result for $kind/$wl (exit $rc); the last lines of its log:" >&2
    grep -v ' INFO ' "$OUT/omb-$wl-$kind-$n.log" | tail -20 >&2
  fi
  rm -rf "$dir" "$SHM/$(basename "$dir")"
}

for ((i = 1; i <= RUNS; i++)); do
  for wl in ${WORKLOADS//,/ }; do
    for kind in ${BROKERS//,/ }; do
      one_run "$kind" "$i" "$wl"
    done
  done
done

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/summary.md"
echo "results in $OUT"
