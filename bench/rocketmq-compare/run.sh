#!/usr/bin/env bash
# Apache RocketMQ 5.x against corvus on this machine, under the same load drivers (RocketMQ's Java
# client, and corvus's `bench remoting` over the same remoting protocol).
#
#   bench/rocketmq-compare/run.sh [--runs N] [--warmup S] [--duration S] [--threads T]
#                                 [--size BYTES] [--queues Q] [--out DIR] [--no-native] [--perf]
#                                 [--driver java|rust|both|v5|all] [--rust-batch M]
#                                 [--rust-batch-conns C] [--rust-batch-inflight K]
#                                 [--rust-batch-duration S] [--rust-batch-pull P]
#                                 [--flush async|sync] [--rocketmq-src DIR] [--tool-batch B]
#                                 [--tools LIST]
#
# --driver: which load drivers run against each broker: the Java one (driver/, RocketMQ's
# client) and/or corvus's `bench remoting` (the same remoting protocol from Rust: THREADS
# connections with one send in flight each, then, unless --rust-batch 0, C connections with K
# SEND_BATCH_MESSAGE requests of M messages in flight). Default both. v5: RocketMQ 5's gRPC
# SDK (driver/'s LoadV5, the same load through rocketmq-client-java) against Apache RocketMQ
# with its Proxy (cluster mode, beside the broker on CPU 0; the CPU counted is broker + Proxy)
# and against corvus's broker port. all: every driver. tools: RocketMQ's own benchmark tools
# (apache/rocketmq's example/.../benchmark Producer, BatchProducer, TransactionProducer and
# Consumer, compiled from the checkout --rocketmq-src names: they are not published to Maven
# Central), run as RocketMQ's docs run them (Producer -w THREADS -s SIZE, ...); a sampler
# (driver/'s Sampler) reads the topic's stored messages and the broker's CPU at the start and
# end of the measured window, and each tool's own last report gives its RT (average and max).
# --flush: async (default: Apache ASYNC_FLUSH, corvus --profile throughput) or sync (Apache
# SYNC_FLUSH, corvus --profile durable).
# --tool-batch: messages per batch of the tools' BatchProducer (default 16, its own default).
# --tools: which tools run, comma-separated (default every one: tool-producer,tool-batch,
# tool-tx,tool-consumer; tool-consumer is the Producer with a Consumer beside it).
# --rust-batch-pull: messages asked per pull in the batched runs (default 32, the Java
# client's pullBatchSize; each broker answers at most its own cap: RocketMQ 32, corvus 1024).
# --rust-batch-duration: measured seconds of the batched runs (default the smaller of
# --duration and 20; warm-up 5 s), which write an order of magnitude more to disk.
# --perf: `perf record -e cpu-clock -g` of the corvus broker over each corvus run's measured
# window (perf-corvus-MODE-N.data in the output directory).
# --corvus-idle-poll-us N: the corvus broker's idle_poll_us (the throughput profile's 200 µs
# of polling after every burst, counted in its CPU time) set to N through --config.
#
# Each broker runs pinned to CPU 0 (`taskset -c 0`, its NameServer beside it), the load
# driver on CPU 1. Runs alternate: rocketmq, corvus, rocketmq, corvus, ... Every run starts
# both processes afresh on empty stores in a temporary directory and removes it afterwards.
# The runs happen inside a network namespace of their own (`unshare -n`) with only the
# loopback device: RocketMQ's HA port binds to the wildcard address, and there it can reach
# nothing but 127.0.0.1. See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
RUNS=2
WARMUP=10
DURATION=30
THREADS=64
SIZE=1024
QUEUES=8
OUT=""
NATIVE=1
PERF=0
IDLE_POLL=""
DRIVER=both
RUST_BATCH=32
RUST_BATCH_CONNS=4
RUST_BATCH_INFLIGHT=4
RUST_BATCH_DURATION=""
RUST_BATCH_PULL=32
FLUSH=async
ROCKETMQ_SRC=""
TOOL_BATCH=16
TOOLS=tool-producer,tool-batch,tool-tx,tool-consumer
INNER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --queues) QUEUES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-native) NATIVE=0; shift ;;
    --perf) PERF=1; shift ;;
    --corvus-idle-poll-us) IDLE_POLL="$2"; shift 2 ;;
    --driver) DRIVER="$2"; shift 2 ;;
    --rust-batch) RUST_BATCH="$2"; shift 2 ;;
    --rust-batch-conns) RUST_BATCH_CONNS="$2"; shift 2 ;;
    --rust-batch-inflight) RUST_BATCH_INFLIGHT="$2"; shift 2 ;;
    --rust-batch-duration) RUST_BATCH_DURATION="$2"; shift 2 ;;
    --rust-batch-pull) RUST_BATCH_PULL="$2"; shift 2 ;;
    --flush) FLUSH="$2"; shift 2 ;;
    --rocketmq-src) ROCKETMQ_SRC="$2"; shift 2 ;;
    --tool-batch) TOOL_BATCH="$2"; shift 2 ;;
    --tools) TOOLS="$2"; shift 2 ;;
    --inner) INNER=1; shift ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

case "$DRIVER" in java|rust|both|v5|all|tools) ;; *) echo "--driver is java, rust, both, v5, all or tools" >&2; exit 2 ;; esac
case "$FLUSH" in async|sync) ;; *) echo "--flush is async or sync" >&2; exit 2 ;; esac
[ -n "$RUST_BATCH_DURATION" ] || RUST_BATCH_DURATION=$((DURATION < 20 ? DURATION : 20))
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/release"

if [ "$INNER" = 0 ]; then
  # --- Preparation, with the network: RocketMQ from Maven Central, the driver, corvus. ---
  [ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (broker on 0, driver on 1)" >&2; exit 1; }
  command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null ||
    { echo "needs java, javac and mvn" >&2; exit 1; }
  BUILD="$TARGET/rocketmq-compare"
  mkdir -p "$BUILD"
  if [ ! -s "$BUILD/cp.txt" ] || [ "$HERE/pom.xml" -nt "$BUILD/cp.txt" ]; then
    echo "== fetching Apache RocketMQ (namesrv, broker, tools, client) from Maven Central"
    (cd "$HERE" && timeout 900 mvn -q -B dependency:build-classpath -Dmdep.outputFile="$BUILD/cp.txt")
  fi
  if [ ! -s "$BUILD/cp-v5.txt" ] || [ "$HERE/v5/pom.xml" -nt "$BUILD/cp-v5.txt" ]; then
    echo "== fetching RocketMQ 5's gRPC SDK for Java from Maven Central"
    (cd "$HERE/v5" && timeout 900 mvn -q -B dependency:build-classpath -Dmdep.outputFile="$BUILD/cp-v5.txt")
  fi
  if [ "$DRIVER" = tools ]; then
    bench_src="$ROCKETMQ_SRC/example/src/main/java/org/apache/rocketmq/example/benchmark"
    [ -n "$ROCKETMQ_SRC" ] && [ -f "$bench_src/Producer.java" ] || {
      echo "--driver tools needs --rocketmq-src: a checkout of github.com/apache/rocketmq" \
        "(e.g. git clone --depth 1 -b rocketmq-all-5.3.3 https://github.com/apache/rocketmq)" >&2
      exit 2
    }
    echo "== compiling RocketMQ's benchmark tools from $bench_src"
    rm -rf "$BUILD/classes-tools"
    javac -nowarn -d "$BUILD/classes-tools" -cp "$(cat "$BUILD/cp.txt")" "$bench_src"/*.java 2>&1 |
      grep -v '^Note:' || true
    [ -f "$BUILD/classes-tools/org/apache/rocketmq/example/benchmark/Producer.class" ] ||
      { echo "RocketMQ's benchmark tools did not compile" >&2; exit 1; }
  fi
  echo "== compiling the load drivers"
  rm -rf "$BUILD/classes" "$BUILD/classes-v5"
  javac -nowarn -d "$BUILD/classes" -cp "$(cat "$BUILD/cp.txt")" "$HERE"/driver/src/main/java/corvus/bench/*.java
  javac -nowarn -d "$BUILD/classes-v5" -cp "$(cat "$BUILD/cp-v5.txt")" \
    "$HERE"/driver/src/v5/java/corvus/bench/*.java "$HERE"/driver/src/main/java/corvus/bench/Window.java
  echo "== building corvus (release: broker, namesrv, bench)"
  (cd "$ROOT" && nice -n 10 cargo build --release -q -p broker -p namesrv -p bench)
  [ -n "$OUT" ] || OUT="$BUILD/results-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT"
  ARGS=(--runs "$RUNS" --warmup "$WARMUP" --duration "$DURATION" --threads "$THREADS"
        --size "$SIZE" --queues "$QUEUES" --out "$OUT" --driver "$DRIVER"
        --rust-batch "$RUST_BATCH" --rust-batch-conns "$RUST_BATCH_CONNS"
        --rust-batch-inflight "$RUST_BATCH_INFLIGHT" --rust-batch-duration "$RUST_BATCH_DURATION"
        --rust-batch-pull "$RUST_BATCH_PULL" --flush "$FLUSH" --tool-batch "$TOOL_BATCH"
        --tools "$TOOLS")
  [ "$NATIVE" = 1 ] || ARGS+=(--no-native)
  [ "$PERF" = 0 ] || ARGS+=(--perf)
  [ -z "$IDLE_POLL" ] || ARGS+=(--corvus-idle-poll-us "$IDLE_POLL")
  {
    echo "commit $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- . ':!BENCHMARKS.md' || echo ' (dirty)')"
    grep -m1 'model name' /proc/cpuinfo
    echo "cpus $(nproc); $(uname -sr); $(java -version 2>&1 | head -1)"
    echo "rocketmq $(grep -o 'rocketmq-broker/[0-9.]*' "$BUILD/cp.txt" | head -1)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } | tee "$OUT/machine.txt"
  export CARGO_TARGET_DIR="$TARGET"
  # Only loopback from here on.
  exec unshare -n -- bash -c 'ip link set lo up && exec bash "$0" --inner "$@"' "$0" "${ARGS[@]}"
fi

# --- Inside the network namespace: the runs. ---
BUILD="$TARGET/rocketmq-compare"
CP="$BUILD/classes:$(cat "$BUILD/cp.txt")"
CP_V5="$BUILD/classes-v5:$(cat "$BUILD/cp-v5.txt")"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
TMP="$(mktemp -d /tmp/rmq-compare.XXXXXX)"
SHM="$(mktemp -d /dev/shm/rmq-compare.XXXXXX)"
PIDS=()

# The brokers' start and stop functions (cleanup, start_rocketmq, start_corvus, ...).
# shellcheck source=brokers.sh
. "$HERE/brokers.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_proxy DIR NSPORT GRPCPORT: Apache's Proxy in cluster mode in front of the broker
# registered at NSPORT, its gRPC port GRPCPORT, pinned beside the broker.
start_proxy() {
  local dir="$1" nsport="$2" grpc="$3" remoting i
  remoting=$(free_port)
  printf '{"rocketMQClusterName": "DefaultCluster", "namesrvAddr": "127.0.0.1:%s", "proxyMode": "cluster", "grpcServerPort": %s, "remotingListenPort": %s}\n' \
    "$nsport" "$grpc" "$remoting" > "$dir/rmq-proxy.json"
  ROCKETMQ_HOME="$TMP/home" taskset -c 0 java -Xms1g -Xmx1g -XX:+AlwaysPreTouch "${JAVA_RMQ[@]}" \
    -Duser.home="$dir" -cp "$CP" org.apache.rocketmq.proxy.ProxyStartup \
    -pc "$dir/rmq-proxy.json" -pm cluster > "$dir/proxy.out" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID")
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$PROXY_PID" 2>/dev/null || { echo "the Proxy exited:" >&2; tail -30 "$dir/proxy.out" >&2; return 1; }
    python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$grpc)))" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "the Proxy did not listen on $grpc within 120 s" >&2; tail -30 "$dir/proxy.out" >&2; return 1
}

# tool_run DIR NSPORT TOPIC MODE N: one of RocketMQ's benchmark tools (MODE tool-producer,
# tool-batch, tool-tx or tool-consumer) over the warm-up and the measured window, with the
# Sampler reading stored messages and broker CPU at the window's ends; writes driver.out with
# the tool's output and a closing "RESULT {json}" line.
tool_run() {
  local dir="$1" nsport="$2" topic="$3" mode="$4" n="$5" cls args=() tool_pid consumer_pid="" s0 s1
  local tcp="$BUILD/classes-tools:$CP"
  case "$mode" in
    tool-producer|tool-consumer) cls=Producer; args=(-w "$THREADS" -s "$SIZE") ;;
    tool-batch) cls=BatchProducer; args=(-w "$THREADS" -s "$SIZE" -b "$TOOL_BATCH") ;;
    tool-tx) cls=TransactionProducer; args=(-w "$THREADS" -s "$SIZE") ;;
  esac
  mkdir -p "$dir/driver" "$dir/consumer"
  coproc SAMPLER { ROCKETMQ_HOME="$TMP/home" taskset -c 1 java -Xmx256m -Duser.home="$dir/driver" \
    -cp "$CP" corvus.bench.Sampler "127.0.0.1:$nsport" "$topic" "$BROKER_PID" 2> "$dir/sampler.err"; }
  PIDS+=("$SAMPLER_PID")
  local ready
  read -r -t 60 -u "${SAMPLER[0]}" ready || { cat "$dir/sampler.err" >&2; return 1; }
  [ "$ready" = READY ] || { echo "sampler: $ready" >&2; return 1; }
  ROCKETMQ_HOME="$TMP/home" taskset -c 1 java -Xms2g -Xmx2g -XX:+UseG1GC -Duser.home="$dir/driver" \
    -cp "$tcp" "org.apache.rocketmq.example.benchmark.$cls" -n "127.0.0.1:$nsport" -t "$topic" \
    "${args[@]}" -ri 1000 > "$dir/tool.out" 2>&1 &
  tool_pid=$!; PIDS+=("$tool_pid")
  if [ "$mode" = tool-consumer ]; then
    ROCKETMQ_HOME="$TMP/home" taskset -c 1 java -Xms1g -Xmx1g -XX:+UseG1GC -Duser.home="$dir/consumer" \
      -cp "$tcp" org.apache.rocketmq.example.benchmark.Consumer -n "127.0.0.1:$nsport" -t "$topic" \
      -g "benchmark_consumer_$n" -ri 1000 > "$dir/consumer.out" 2>&1 &
    consumer_pid=$!; PIDS+=("$consumer_pid")
  fi
  sleep "$WARMUP"
  echo >&"${SAMPLER[1]}"; read -r -t 60 -u "${SAMPLER[0]}" s0 || { cat "$dir/sampler.err" >&2; return 1; }
  sleep "$DURATION"
  echo >&"${SAMPLER[1]}"; read -r -t 60 -u "${SAMPLER[0]}" s1 || { cat "$dir/sampler.err" >&2; return 1; }
  kill "$tool_pid" $consumer_pid 2>/dev/null || true
  wait "$tool_pid" $consumer_pid 2>/dev/null || true
  local sampler_in="${SAMPLER[1]}" sampler_pid="$SAMPLER_PID"
  exec {sampler_in}>&-
  wait "$sampler_pid" 2>/dev/null || true
  cp "$dir/tool.out" "$dir/driver.out"
  [ -z "$consumer_pid" ] || sed 's/^/consumer: /' "$dir/consumer.out" >> "$dir/driver.out"
  python3 - "$s0" "$s1" "$mode" "$THREADS" "$SIZE" "$TOOL_BATCH" "$FLUSH" "$dir/tool.out" "$dir/consumer.out" \
    >> "$dir/driver.out" <<'PY'
import json, re, sys
s0, s1, mode, threads, size, batch, flush, tool, consumer = sys.argv[1:]
_, ms0, m0, c0 = s0.split(); _, ms1, m1, c1 = s1.split()
secs = (int(ms1) - int(ms0)) / 1000
sent = int(m1) - int(m0)
cpu = (float(c1) - float(c0)) / 100
def last(path, key):
    # The tool's last report (a 10 s moving window, one line a second).
    lines = [l for l in open(path, errors="replace") if key in l]
    return lines[-1] if lines else ""
def field(line, name):
    m = re.search(re.escape(name) + r": *(-?[0-9.]+)", line)
    return float(m.group(1)) if m else None
line = last(tool, "Send TPS")
r = dict(driver=mode, threads=int(threads), size=int(size), flush=flush, window_s=secs,
         sent=sent, send_tps=sent / secs if secs else 0, broker_cpu_s=cpu,
         broker_cpu_util=cpu / secs if secs else 0,
         broker_cpu_s_per_M_sent=cpu / sent * 1e6 if sent else float("nan"),
         tool_send_tps=field(line, "Send TPS"),
         # TransactionProducer prints its average as "AVG RT(ms)".
         rt_avg_ms=field(line, "Average RT(ms)") or field(line, "AVG RT(ms)"),
         rt_max_ms=field(line, "Max RT(ms)"),
         failed=int((field(line, "Send Failed") or 0) + (field(line, "Response Failed") or 0)
                    + (field(line, "Send Message Failed") or 0)))
if mode == "tool-batch":
    r.update(batch=int(batch), tool_send_mps=field(line, "Send MPS"),
             rt_avg_message_ms=field(line, "Average Message RT(ms)"))
if mode == "tool-consumer":
    c = last(consumer, "Consume TPS")
    r.update(consume_tps=field(c, "Consume TPS"), b2c_avg_ms=field(c, "AVG(B2C) RT(ms)"),
             s2c_avg_ms=field(c, "AVG(S2C) RT(ms)"), consume_failed=field(c, "Consume Fail"))
print("RESULT " + json.dumps(r))
PY
}

# one_run KIND N MODE: MODE is java (driver/), rust-single or rust-batch (bench remoting), or
# one of RocketMQ's tools (tool-*, see tool_run).
one_run() {
  local kind="$1" n="$2" mode="$3" dir="$TMP/$1-$2-$3" nsport port topic=BenchTopic line
  nsport=$(free_port); port=$(free_port)
  mkdir -p "$dir"
  disk_ok
  echo "== run $n: $kind, driver $mode (load $(cut -d' ' -f1 /proc/loadavg))"
  if [ "$kind" = rocketmq ]; then start_rocketmq "$dir" "$nsport" "$port"; else start_corvus "$dir" "$nsport" "$port"; fi
  # The topic, created the same way on both (RocketMQ's mqadmin, by cluster), once the broker
  # has registered with its NameServer.
  local try
  for ((try = 1; ; try++)); do
    mqadmin updateTopic -n "127.0.0.1:$nsport" -c DefaultCluster -t "$topic" -r "$QUEUES" -w "$QUEUES" \
      > "$dir/updateTopic.out" 2>&1 || true
    grep -q 'create topic to .* success' "$dir/updateTopic.out" && break
    [ "$try" -lt 30 ] || { grep -v '|-INFO' "$dir/updateTopic.out" >&2; return 1; }
    sleep 1
  done
  # The v5 SDK's endpoint, and the processes whose CPU is counted.
  local endpoint="127.0.0.1:$port" server_pids="$BROKER_PID"
  if [ "$mode" = v5 ] && [ "$kind" = rocketmq ]; then
    local grpc
    grpc=$(free_port)
    start_proxy "$dir" "$nsport" "$grpc"
    endpoint="127.0.0.1:$grpc"; server_pids="$BROKER_PID,$PROXY_PID"
  fi
  sleep 2
  local load0 load1 perf_pid=""
  load0=$(cut -d' ' -f1 /proc/loadavg)
  if [ "$PERF" = 1 ] && [ "$kind" = corvus ]; then
    (sleep $((WARMUP + 3)); exec taskset -c 1 perf record -q -e cpu-clock -g -p "$BROKER_PID" \
       -o "$OUT/perf-$kind-$mode-$n.data" -- sleep $((DURATION - 5))) > "$dir/perf.out" 2>&1 &
    perf_pid=$!; PIDS+=("$perf_pid")
  fi
  case "$mode" in
    java)
      ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout $((WARMUP + DURATION + 120)) \
        java -Xms2g -Xmx2g -XX:+UseG1GC -Duser.home="$dir/driver" -Drocketmq.client.logRoot="$dir/driver/logs" \
        -cp "$CP" corvus.bench.Load "127.0.0.1:$nsport" "$topic" "$THREADS" "$SIZE" "$WARMUP" "$DURATION" \
        "$BROKER_PID" > "$dir/driver.out" 2>&1 || { tail -40 "$dir/driver.out" >&2; return 1; }
      ;;
    v5)
      ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout $((WARMUP + DURATION + 120)) \
        java -Xms2g -Xmx2g -XX:+UseG1GC -Duser.home="$dir/driver" \
        -cp "$CP_V5" corvus.bench.LoadV5 "$endpoint" "$topic" "$THREADS" "$SIZE" "$WARMUP" "$DURATION" \
        "$server_pids" > "$dir/driver.out" 2>&1 || { tail -40 "$dir/driver.out" >&2; return 1; }
      ;;
    rust-single)
      # One send in flight on each of THREADS connections: the Java driver's THREADS
      # synchronous senders. `|| true`: failed sends are counted in the RESULT line.
      taskset -c 1 timeout $((WARMUP + DURATION + 120)) "$BIN/bench" remoting -n "127.0.0.1:$nsport" \
        -t "$topic" --producers "$THREADS" --inflight 1 --batch 1 --size "$SIZE" --warmup "$WARMUP" \
        --duration "$DURATION" --broker-pid "$BROKER_PID" > "$dir/driver.out" 2>&1 || true
      ;;
    rust-batch)
      taskset -c 1 timeout $((5 + RUST_BATCH_DURATION + 120)) "$BIN/bench" remoting -n "127.0.0.1:$nsport" \
        -t "$topic" --producers "$RUST_BATCH_CONNS" --inflight "$RUST_BATCH_INFLIGHT" --batch "$RUST_BATCH" \
        --pull-batch "$RUST_BATCH_PULL" --size "$SIZE" --warmup 5 --duration "$RUST_BATCH_DURATION" --broker-pid "$BROKER_PID" \
        > "$dir/driver.out" 2>&1 || true
      ;;
    tool-*)
      tool_run "$dir" "$nsport" "$topic" "$mode" "$n" || return 1
      ;;
  esac
  grep -q '^RESULT ' "$dir/driver.out" || { tail -40 "$dir/driver.out" >&2; return 1; }
  load1=$(cut -d' ' -f1 /proc/loadavg)
  [ -z "$perf_pid" ] || wait "$perf_pid" || true
  { grep -E '^t=|Send TPS|Consume TPS' "$dir/driver.out" || true; } | tail -3
  line=$(grep '^RESULT ' "$dir/driver.out" | sed 's/^RESULT //')
  local rss
  rss=$(awk '/VmHWM/{print $2}' "/proc/$BROKER_PID/status" 2>/dev/null || echo 0)
  echo "$line" | python3 -c "
import json,sys
d=json.load(sys.stdin); d.update(broker='$kind', run=$n, driver='$mode', corvus_idle_poll_us='$IDLE_POLL', flush='$FLUSH', load_before=float('$load0'), load_after=float('$load1'), broker_hwm_kib=int('${rss:-0}' or 0))
print(json.dumps(d))" | tee -a "$RESULTS"
  cp "$dir/driver.out" "$OUT/driver-$kind-$mode-$n.out"
  # What the broker said, and the first errors the clients logged (a failed send's cause).
  cp "$dir/broker.out" "$OUT/broker-$kind-$mode-$n.out" 2>/dev/null || true
  { grep -rh -A3 -E ' (ERROR|WARN) ' "$dir/driver/logs" "$dir/consumer/logs" 2>/dev/null || true; } |
    head -200 > "$OUT/client-errors-$kind-$mode-$n.log"
  [ -z "$PROXY_PID" ] || { stop_pid "$PROXY_PID"; PROXY_PID=""; }
  stop_pid "$BROKER_PID"; stop_pid "$NS_PID"
  rm -rf "$dir" "$SHM/$(basename "$dir")"
}

MODES=()
case "$DRIVER" in java|both|all) MODES+=(java) ;; esac
case "$DRIVER" in rust|both|all)
  MODES+=(rust-single)
  [ "$RUST_BATCH" -le 1 ] || MODES+=(rust-batch) ;;
esac
case "$DRIVER" in v5|all) MODES+=(v5) ;; esac
if [ "$DRIVER" = tools ]; then
  IFS=, read -r -a MODES <<< "$TOOLS"
  for m in "${MODES[@]}"; do
    case "$m" in tool-producer|tool-batch|tool-tx|tool-consumer) ;;
      *) echo "--tools: unknown tool $m" >&2; exit 2 ;; esac
  done
fi
# Each driver's runs alternate rocketmq, corvus, rocketmq, corvus, ... on fresh brokers.
for ((i = 1; i <= RUNS; i++)); do
  for mode in "${MODES[@]}"; do
    one_run rocketmq "$i" "$mode"
    one_run corvus "$i" "$mode"
  done
done

if [ "$NATIVE" = 1 ]; then
  echo "== reference: corvus's own bench over its native protocol (its own broker on CPU 0)"
  # Batched async sends (the bench's defaults), bounded to 5 M messages (5 GB on disk).
  (cd "$TMP" && timeout 300 "$BIN/bench" produce --messages 5000000 --no-disk \
     > "$OUT/native-produce.out" 2>&1 || true)
  tail -25 "$OUT/native-produce.out"
  # One message per send, each waited for, as the Java driver sends.
  (cd "$TMP" && timeout 300 "$BIN/bench" produce --sync --batch 1 --producers 8 --duration "$DURATION" \
     --no-disk > "$OUT/native-produce-sync.out" 2>&1 || true)
  tail -25 "$OUT/native-produce-sync.out"
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
python3 "$HERE/summarize.py" "$RESULTS" | tee "$OUT/summary.md"
echo "results in $OUT"
