#!/usr/bin/env bash
# The cost of asynchronous replication, Apache RocketMQ 5.x beside corvus on this machine: each
# broker standalone and as an ASYNC_MASTER with a SLAVE, under the same load driver (corvus's
# `bench remoting`, batched sends over RocketMQ's remoting protocol), with the slave's lag.
#
#   bench/rocketmq-compare/replica.sh [--rounds N] [--warmup S] [--duration S] [--size BYTES]
#                                     [--queues Q] [--conns C] [--inflight K] [--batch M]
#                                     [--pull P] [--light C:K] [--interval-ms MS] [--out DIR]
#                                     [--brokers "rocketmq corvus"] [--no-lag] [--no-build]
#
# Per round, alternating (the order of standalone and replicated flips every round):
# rocketmq standalone, rocketmq ASYNC_MASTER+SLAVE, corvus standalone, corvus
# ASYNC_MASTER+SLAVE; each on fresh stores. Master and its NameServer on CPU 0; the slave and
# the load driver (and the lag sampler) on CPU 1, as corvus's own `bench produce --replica`.
# The driver: C connections (4) with K (4) SEND_BATCH_MESSAGE requests of M (32) messages of
# SIZE (1024) bytes in flight, a puller per queue (P, 32, a pull), WARMUP (5) s then
# DURATION (20) s measured. --light C:K adds, per round and setup, a run with C connections
# and K in flight (a lower rate: `bench remoting` has no pacing).
# The lag: every --interval-ms (50) over the measured window, the master's replication status
# (RocketMQ: GET_BROKER_HA_STATUS, mqadmin haStatus, by driver/HaLag.java; corvus: `mqadmin
# --json ha-status`) as the master's end and the slave's acknowledged offset; replica_lag.py
# turns them into bytes behind and milliseconds behind; --no-lag runs without the sampler
# (it shares CPU 1 with the driver and the slave). --no-build: use the corvus binaries
# already in $CARGO_TARGET_DIR/release. See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ROUNDS=2 WARMUP=5 DURATION=20 SIZE=1024 QUEUES=8 CONNS=4 INFLIGHT=4 BATCH=32 PULL=32
LIGHT="" INTERVAL=50 OUT="" INNER=0 BUILD_CORVUS=1 BROKERS="rocketmq corvus" LAG=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --queues) QUEUES="$2"; shift 2 ;;
    --conns) CONNS="$2"; shift 2 ;;
    --inflight) INFLIGHT="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --pull) PULL="$2"; shift 2 ;;
    --light) LIGHT="$2"; shift 2 ;;
    --interval-ms) INTERVAL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-build) BUILD_CORVUS=0; shift ;;
    --brokers) BROKERS="$2"; shift 2 ;;
    --no-lag) LAG=0; shift ;;
    --inner) INNER=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/release"
BUILD="$TARGET/rocketmq-compare"

if [ "$INNER" = 0 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (master on 0, slave and driver on 1)" >&2; exit 1; }
  command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null ||
    { echo "needs java, javac and mvn" >&2; exit 1; }
  mkdir -p "$BUILD"
  if [ ! -s "$BUILD/cp.txt" ] || [ "$HERE/pom.xml" -nt "$BUILD/cp.txt" ]; then
    echo "== fetching Apache RocketMQ (namesrv, broker, tools, client) from Maven Central"
    (cd "$HERE" && timeout 900 mvn -q -B dependency:build-classpath -Dmdep.outputFile="$BUILD/cp.txt")
  fi
  echo "== compiling the load driver and the HA sampler"
  rm -rf "$BUILD/classes"
  javac -nowarn -d "$BUILD/classes" -cp "$(cat "$BUILD/cp.txt")" "$HERE"/driver/src/main/java/corvus/bench/*.java
  echo "== building corvus (release: broker, namesrv, bench, mqadmin)"
  [ "$BUILD_CORVUS" = 0 ] ||
    (cd "$ROOT" && nice -n 10 cargo build --release -q -p broker -p namesrv -p bench -p mqadmin)
  [ -n "$OUT" ] || OUT="$BUILD/replica-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT"
  {
    echo "commit $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- . ':!BENCHMARKS.md' || echo ' (dirty)')"
    grep -m1 'model name' /proc/cpuinfo
    echo "cpus $(nproc); $(uname -sr); $(java -version 2>&1 | head -1)"
    echo "rocketmq $(grep -o 'rocketmq-broker/[0-9.]*' "$BUILD/cp.txt" | head -1)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } | tee "$OUT/machine.txt"
  export CARGO_TARGET_DIR="$TARGET"
  ARGS=(--rounds "$ROUNDS" --warmup "$WARMUP" --duration "$DURATION" --size "$SIZE"
        --queues "$QUEUES" --conns "$CONNS" --inflight "$INFLIGHT" --batch "$BATCH" --pull "$PULL"
        --interval-ms "$INTERVAL" --out "$OUT" --brokers "$BROKERS")
  [ -z "$LIGHT" ] || ARGS+=(--light "$LIGHT")
  [ "$LAG" = 1 ] || ARGS+=(--no-lag)
  # Only loopback from here on.
  exec unshare -n -- bash -c 'ip link set lo up && exec bash "$0" --inner "$@"' "$0" "${ARGS[@]}"
fi

# --- Inside the network namespace. ---
CP="$BUILD/classes:$(cat "$BUILD/cp.txt")"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
TMP="$(mktemp -d /tmp/rmq-replica.XXXXXX)"
SHM="$(mktemp -d /dev/shm/rmq-replica.XXXXXX)"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$TMP" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port: a loopback port whose successor is free too (both brokers' HA port is port + 1).
free_port() {
  python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
    finally:
        t.close(); s.close()'
}

# wait_for FILE PATTERN PID SECONDS
wait_for() {
  local i
  for ((i = 0; i < $4 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || { echo "process $3 died; log $1:" >&2; tail -30 "$1" >&2; return 1; }
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2; tail -30 "$1" >&2; return 1
}

stop_pid() {
  local p="$1" i
  [ -n "$p" ] || return 0
  kill "$p" 2>/dev/null || return 0
  for ((i = 0; i < 300; i++)); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
}

# Stores need room: RocketMQ preallocates 1 GiB CommitLog files, and a replicated run writes
# every byte twice. No run starts with less than 12 GiB available.
disk_ok() {
  local avail
  avail=$(df -Pk "$TMP" | awk 'NR==2{print $4}')
  [ "$avail" -ge $((12 * 1024 * 1024)) ] ||
    { echo "under 12 GiB available for $TMP; no more runs" >&2; return 1; }
}

JAVA_RMQ=(-server -XX:+UseG1GC -XX:G1HeapRegionSize=16m -XX:G1ReservePercent=25
  -XX:InitiatingHeapOccupancyPercent=30 -XX:SoftRefLRUPolicyMSPerMB=0
  -XX:-OmitStackTraceInFastThrow -XX:-UseLargePages
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED)

mqadmin_java() {
  ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout 60 java -Xmx256m -Duser.home="$TMP/home" \
    -cp "$CP" org.apache.rocketmq.tools.command.MQAdminStartup "$@"
}

NS_PID="" BROKER_PID="" SLAVE_PID="" HA_ADDR=""
# rocketmq_broker DIR NSPORT PORT ROLE CPU: one RocketMQ broker of broker-a (SLAVE: brokerId 1).
rocketmq_broker() {
  local dir="$1" nsport="$2" port="$3" role="$4" cpu="$5" id=0
  mkdir -p "$dir/store"
  # The slave learns its master's HA address (brokerIP2:haListenPort) from the NameServer's
  # answer to its registration. With `haMasterAddress` set instead, this 5.3.3 slave never
  # connected (store.log: "HAClient connect to master null failed" every 5 s).
  [ "$role" = SLAVE ] && id=1
  cat > "$dir/broker.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=$id
brokerRole=$role
flushDiskType=ASYNC_FLUSH
autoCreateTopicEnable=true
namesrvAddr=127.0.0.1:$nsport
listenPort=$port
bindAddress=127.0.0.1
brokerIP1=127.0.0.1
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
deleteWhen=04
fileReservedTime=48
CONF
  ROCKETMQ_HOME="$TMP/home" taskset -c "$cpu" java -Xms1g -Xmx1g -XX:+AlwaysPreTouch \
    -XX:MaxDirectMemorySize=8g "${JAVA_RMQ[@]}" \
    -Duser.home="$dir" -cp "$CP" org.apache.rocketmq.broker.BrokerStartup \
    -c "$dir/broker.conf" > "$dir/broker.out" 2>&1 &
  local pid=$!; PIDS+=("$pid")
  wait_for "$dir/broker.out" "boot success" "$pid" 120
  if [ "$role" = SLAVE ]; then SLAVE_PID=$pid; else BROKER_PID=$pid; fi
}

start_rocketmq() {
  local dir="$1" nsport="$2" port="$3" replicated="$4"
  mkdir -p "$dir/ns" "$TMP/home"
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$nsport" > "$dir/ns/namesrv.conf"
  ROCKETMQ_HOME="$TMP/home" taskset -c 0 java -Xms256m -Xmx256m "${JAVA_RMQ[@]}" \
    -Duser.home="$dir/ns" -cp "$CP" org.apache.rocketmq.namesrv.NamesrvStartup \
    -c "$dir/ns/namesrv.conf" > "$dir/ns/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/ns/namesrv.out" "boot success" "$NS_PID" 60
  rocketmq_broker "$dir/master" "$nsport" "$port" ASYNC_MASTER 0
  if [ "$replicated" = 1 ]; then
    rocketmq_broker "$dir/slave" "$nsport" "$(free_port)" SLAVE 1
  fi
}

start_corvus() {
  local dir="$1" nsport="$2" port="$3" replicated="$4"
  mkdir -p "$dir/master" "$SHM/$(basename "$dir")/master"
  taskset -c 0 "$BIN/namesrv" --listen "127.0.0.1:$nsport" > "$dir/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/namesrv.out" "namesrv listening on" "$NS_PID" 30
  # The replication port: ha_listen_port's default, the client port + 1.
  printf 'broker_role = "ASYNC_MASTER"\n' > "$dir/master.toml"
  taskset -c 0 "$BIN/broker" --cores 1 --profile throughput --config "$dir/master.toml" \
    --listen "127.0.0.1:$port" --namesrv "127.0.0.1:$nsport" --data-dir "$dir/master/data" \
    --tail-ring-dir "$SHM/$(basename "$dir")/master" > "$dir/master/broker.out" 2>&1 &
  BROKER_PID=$!; PIDS+=("$BROKER_PID")
  wait_for "$dir/master/broker.out" "broker listening on" "$BROKER_PID" 60
  HA_ADDR="127.0.0.1:$((port + 1))"
  if [ "$replicated" = 1 ]; then
    mkdir -p "$dir/slave" "$SHM/$(basename "$dir")/slave"
    # idle_poll_us = 0: the slave shares CPU 1 with the driver, and a core polling while idle
    # would take the driver's CPU (what corvus's `bench produce --replica` does too).
    printf 'broker_role = "SLAVE"\nbroker_id = 1\nha_master_address = "%s"\nidle_poll_us = 0\n' \
      "$HA_ADDR" > "$dir/slave.toml"
    taskset -c 1 "$BIN/broker" --cores 1 --profile throughput --config "$dir/slave.toml" \
      --listen "127.0.0.1:$(free_port)" --namesrv "127.0.0.1:$nsport" --data-dir "$dir/slave/data" \
      --tail-ring-dir "$SHM/$(basename "$dir")/slave" > "$dir/slave/broker.out" 2>&1 &
    SLAVE_PID=$!; PIDS+=("$SLAVE_PID")
    wait_for "$dir/slave/broker.out" "broker listening on" "$SLAVE_PID" 60
  fi
}

cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# one_run KIND ROUND SETUP CONNS INFLIGHT: SETUP is standalone or async (ASYNC_MASTER + SLAVE).
one_run() {
  local kind="$1" n="$2" setup="$3" conns="$4" inflight="$5"
  local name="$kind-$setup-c$conns-k$inflight-$n" dir nsport port topic=BenchTopic replicated=0
  dir="$TMP/$name"; nsport=$(free_port); port=$(free_port)
  [ "$setup" = async ] && replicated=1
  mkdir -p "$dir"
  disk_ok
  local load0 load1
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== round $n: $kind $setup, $conns x $inflight x $BATCH in flight (load $load0)"
  NS_PID="" BROKER_PID="" SLAVE_PID=""
  if [ "$kind" = rocketmq ]; then
    start_rocketmq "$dir" "$nsport" "$port" "$replicated"
  else
    start_corvus "$dir" "$nsport" "$port" "$replicated"
  fi
  # The topic, the same way on both: RocketMQ's mqadmin, by cluster (the masters only).
  local try
  for ((try = 1; ; try++)); do
    mqadmin_java updateTopic -n "127.0.0.1:$nsport" -c DefaultCluster -t "$topic" -r "$QUEUES" -w "$QUEUES" \
      > "$dir/updateTopic.out" 2>&1 || true
    grep -q 'create topic to .* success' "$dir/updateTopic.out" && break
    [ "$try" -lt 30 ] || { grep -v '|-INFO' "$dir/updateTopic.out" >&2; return 1; }
    sleep 1
  done
  sleep 2
  local sampler="" begin_ms
  # The driver's measured window, on the wall clock: it starts right after the sampler.
  begin_ms=$(( $(date +%s%3N) + WARMUP * 1000 ))
  if [ "$replicated" = 1 ] && [ "$LAG" = 1 ]; then
    if [ "$kind" = rocketmq ]; then
      ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout $((WARMUP + DURATION + 60)) java -Xmx256m \
        -Duser.home="$dir/sampler" -Drocketmq.client.logRoot="$dir/sampler/logs" -cp "$CP" \
        corvus.bench.HaLag "127.0.0.1:$nsport" "127.0.0.1:$port" "$INTERVAL" "$begin_ms" "$DURATION" \
        > "$dir/lag.out" 2> "$dir/lag.err" &
    else
      taskset -c 1 timeout $((WARMUP + DURATION + 60)) python3 "$HERE/replica_lag.py" sample-corvus \
        "$BIN/mqadmin" "127.0.0.1:$nsport" "127.0.0.1:$port" "$INTERVAL" "$begin_ms" "$DURATION" \
        > "$dir/lag.out" 2> "$dir/lag.err" &
    fi
    sampler=$!; PIDS+=("$sampler")
  fi
  local m0 s0=0 m1 s1=0
  m0=$(cpu_s "$BROKER_PID"); [ -z "$SLAVE_PID" ] || s0=$(cpu_s "$SLAVE_PID")
  # `|| true`: failed sends are counted in the RESULT line.
  taskset -c 1 timeout $((WARMUP + DURATION + 120)) "$BIN/bench" remoting -n "127.0.0.1:$nsport" \
    -t "$topic" --producers "$conns" --inflight "$inflight" --batch "$BATCH" --pull-batch "$PULL" \
    --size "$SIZE" --warmup "$WARMUP" --duration "$DURATION" --broker-pid "$BROKER_PID" \
    > "$dir/driver.out" 2>&1 || true
  m1=$(cpu_s "$BROKER_PID"); [ -z "$SLAVE_PID" ] || s1=$(cpu_s "$SLAVE_PID")
  local lag='{}'
  if [ -n "$sampler" ]; then
    wait "$sampler" || true
    lag=$(python3 "$HERE/replica_lag.py" report "$dir/lag.out")
    cp "$dir/lag.out" "$OUT/lag-$name.out"; cp "$dir/lag.err" "$OUT/lag-$name.err"
  fi
  load1=$(cut -d' ' -f1-3 /proc/loadavg)
  cp "$dir/driver.out" "$OUT/driver-$name.out"
  grep -q '^RESULT ' "$dir/driver.out" || { tail -40 "$dir/driver.out" >&2; return 1; }
  grep -E '^t=' "$dir/driver.out" | tail -2 || true
  grep '^RESULT ' "$dir/driver.out" | sed 's/^RESULT //' | python3 -c "
import json, sys
d = json.load(sys.stdin)
d.update(broker='$kind', setup='$setup', lag_sampler=$LAG, round=$n, conns=$conns, inflight=$inflight, batch=$BATCH,
         lag=json.loads('''$lag'''), load_before='$load0', load_after='$load1',
         master_cpu_s_total=$m1 - $m0, slave_cpu_s_total=$s1 - $s0)
print(json.dumps(d))" | tee -a "$RESULTS"
  stop_pid "$SLAVE_PID"; stop_pid "$BROKER_PID"; stop_pid "$NS_PID"
  rm -rf "$dir" "$SHM/$(basename "$dir")"
}

LEVELS=("$CONNS:$INFLIGHT")
[ -z "$LIGHT" ] || LEVELS+=("$LIGHT")
for ((i = 1; i <= ROUNDS; i++)); do
  setups=(standalone async)
  [ $((i % 2)) = 1 ] || setups=(async standalone)
  for level in "${LEVELS[@]}"; do
    for kind in $BROKERS; do
      for setup in "${setups[@]}"; do
        one_run "$kind" "$i" "$setup" "${level%%:*}" "${level##*:}"
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
python3 "$HERE/replica_summary.py" "$RESULTS" | tee "$OUT/summary.md"
echo "results in $OUT"
