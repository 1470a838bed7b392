#!/usr/bin/env bash
# Lite Topics (RocketMQ 5.5) on Apache RocketMQ 5.5.1 and on corvus, one after the other, under
# the same driver: `bench lite` (bench/src/lite.rs) with the same lite topics, clients and
# threads.
#
#   bench/rocketmq-compare/lite.sh [--lite-topics N] [--per-client C] [--threads T]
#                                  [--heap SIZE] [--out DIR]
#
# Apache: its NameServer and broker from Maven Central (v551/pom.xml beside this file), on
# loopback, with LMQ on (enableLmq, enableMultiDispatch: a lite topic is an LMQ), the LMQ quota
# off, RocksDB consume queues (storeType=defaultRocksDB: the file consume queue maps one file
# per LMQ, and a process may hold 65,530 maps by default), the lite subscription quota above
# N, and its backlog dispatch set to hand a client all its lite topics at once
# (maxClientEventCount = --per-client, liteEventFullDispatchDelayTime 0, liteEventCheckInterval
# 100 ms; by default a client subscribing to lite topics that already hold messages is handed
# 100 of them every 10 s or more), and a heap of --heap (default 4g; -Xms 256m, so its RssAnon grows as it is used). The
# bench is given the broker's pid (its RssAnon is sampled) and creates the consumer group
# bound to the parent (--bind-group), which Apache requires; it does not restart Apache.
# Then `bench lite` starts corvus (2 cores) itself and runs the same, restart included.
#
# Everything runs in a network namespace of its own (`unshare -n`) with only the loopback
# device: Apache's HA port binds to the wildcard address. Results: DIR/apache.out and
# DIR/corvus.out (DIR defaults to a new temporary directory), and both RESULT lines printed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N=100000
PER_CLIENT=2000
THREADS=4
HEAP=4g
OUT=""
INNER=0
ARGS=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --lite-topics) N="$2"; shift 2 ;;
    --per-client) PER_CLIENT="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --heap) HEAP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --inner) INNER=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

BENCH="${CARGO_TARGET_DIR:-$ROOT/target}/release/bench"
[ -x "$BENCH" ] || { echo "build first: cargo build --release -p bench -p broker -p namesrv" >&2; exit 1; }

if [ "$INNER" = 0 ]; then
  OUT="${OUT:-$(mktemp -d /tmp/corvus-lite-cmp.XXXXXX)}"
  mkdir -p "$OUT"
  export RMQ_CP="$OUT/cp551.txt"
  echo "== fetching Apache RocketMQ 5.5.1 (bench/rocketmq-compare/v551/pom.xml)"
  (cd "$HERE/v551" && timeout 900 mvn -q -B dependency:build-classpath -Dmdep.outputFile="$RMQ_CP")
  exec unshare -n -- bash -c 'ip link set lo up && exec bash "$0" --inner "$@"' "$0" "${ARGS[@]}" --out "$OUT"
fi

export RMQ_CP="$OUT/cp551.txt"
PIDS=()
# shellcheck source=../../tests/rocketmq-diff/apache-lib.sh
source "$ROOT/tests/rocketmq-diff/apache-lib.sh"
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

APACHE="$OUT/apache"
mkdir -p "$APACHE/store" "$APACHE/home"
NSPORT=$(free_port)
PORT=$(free_port)
cat > "$APACHE/broker.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
autoCreateTopicEnable=false
enableLmq=true
enableMultiDispatch=true
enableLmqQuota=false
maxLmqConsumeQueueNum=$((N * 2 > 20000 ? N * 2 : 20000))
maxLiteSubscriptionCount=$((N * 2 > 100000 ? N * 2 : 100000))
storeType=defaultRocksDB
maxClientEventCount=$PER_CLIENT
liteEventFullDispatchDelayTime=0
liteEventCheckInterval=100
mappedFileSizeCommitLog=1073741824
diskMaxUsedSpaceRatio=97
waitTimeMillsInSendQueue=2000
namesrvAddr=127.0.0.1:$NSPORT
listenPort=$PORT
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
storePathRootDir=$APACHE/store
storePathCommitLog=$APACHE/store/commitlog
CONF
printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$NSPORT" > "$APACHE/namesrv.conf"
echo "== Apache RocketMQ 5.5.1: NameServer :$NSPORT, broker :$PORT, heap $HEAP"
ROCKETMQ_HOME="$APACHE/home" java -Xms64m -Xmx256m "${JAVA_RMQ[@]}" -Duser.home="$APACHE/home" \
  -cp "$(cat "$RMQ_CP")" org.apache.rocketmq.namesrv.NamesrvStartup -c "$APACHE/namesrv.conf" \
  > "$APACHE/namesrv.out" 2>&1 &
NS_PID=$!; PIDS+=("$NS_PID")
wait_for "$APACHE/namesrv.out" "boot success" "$NS_PID" 90
ROCKETMQ_HOME="$APACHE/home" java -Xms256m -Xmx"$HEAP" -XX:MaxDirectMemorySize=1g "${JAVA_RMQ[@]}" \
  -Duser.home="$APACHE/home" -cp "$(cat "$RMQ_CP")" org.apache.rocketmq.broker.BrokerStartup \
  -c "$APACHE/broker.conf" > "$APACHE/broker.out" 2>&1 &
BROKER_PID=$!; PIDS+=("$BROKER_PID")
wait_for "$APACHE/broker.out" "boot success" "$BROKER_PID" 180

echo "== bench lite on Apache RocketMQ 5.5.1 (N=$N)"
status=0
"$BENCH" lite --lite-topics "$N" --per-client "$PER_CLIENT" --threads "$THREADS" \
  --namesrv "127.0.0.1:$NSPORT" --broker-pid "$BROKER_PID" --bind-group \
  > "$OUT/apache.out" 2> "$OUT/apache.err" || status=$?
[ "$status" = 0 ] || { echo "bench lite on Apache failed ($status):" >&2; tail -20 "$OUT/apache.err" >&2; }
stop_all
PIDS=()

echo "== bench lite on corvus (N=$N)"
"$BENCH" lite --lite-topics "$N" --per-client "$PER_CLIENT" --threads "$THREADS" \
  > "$OUT/corvus.out" 2> "$OUT/corvus.err" || { echo "bench lite on corvus failed:" >&2; tail -20 "$OUT/corvus.err" >&2; exit 1; }

echo "== results ($OUT)"
echo "apache 5.5.1: $(grep -v '^RESULT' "$OUT/apache.out" || true)"
echo "corvus:       $(grep -v '^RESULT' "$OUT/corvus.out")"
grep '^RESULT' "$OUT/apache.out" | sed 's/^/apache /' || true
grep '^RESULT' "$OUT/corvus.out" | sed 's/^/corvus /'
