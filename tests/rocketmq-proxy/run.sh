#!/usr/bin/env bash
# Apache's rocketmq-proxy 5.3.3 in cluster mode in front of corvus, and a producer on RocketMQ's
# v5 gRPC SDK (rocketmq-client-java 5.0.8) through it:
#
#   tests/rocketmq-proxy/run.sh [--no-build] [--keep] [--cluster-topic]
#
# Starts corvus's NameServer and broker (target/debug; --no-build uses them as they are), creates
# ProxyTopic (Apache's mqadmin updateTopic -c DefaultCluster), starts the Proxy (server/pom.xml's
# classpath, -pm cluster, its NameServer corvus's), waits for its gRPC port, then runs
# corvus.proxy.GrpcProducer: three normal sends must succeed; a send with a delivery timestamp,
# one with a message group and a SimpleConsumer's receive (POP) are tried and reported (the v5
# scenarios through the Proxy are tests/tests/rocketmq_java_proxy.rs). Prints what worked and
# what failed, and the Proxy's errors. Every process is stopped by its pid and the temporary
# directory removed (--keep keeps it).
#
# At its start the Proxy creates its system topic through the route of the topic named after the
# cluster (DefaultCluster), which RocketMQ's brokers register; --cluster-topic creates a topic of
# that name first (updateTopic), for a broker that does not register it, to see what follows.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BUILD=1
KEEP=0
CLUSTER_TOPIC=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    --cluster-topic) CLUSTER_TOPIC=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

# maven_cp, stop_all_on_exit, free_port, wait_for.
source "$ROOT/tests/rocketmq-diff/apache-lib.sh"
maven_cp "$HERE" compile
maven_cp "$HERE/server"
# Apache's admin tool, for updateTopic: the harness's 5.3.3 classpath.
maven_cp "$ROOT/tests/rocketmq-diff/client5"
[ "$BUILD" = 0 ] || (cd "$ROOT" && nice -n 10 cargo build -q -p broker -p namesrv)

TMP="$(mktemp -d /tmp/rmq-proxy.XXXXXX)"
PIDS=()
stop_all_on_exit

NS=$(free_port); BROKER=$(free_port); GRPC=$(free_port); REMOTING=$(free_port)
mkdir -p "$TMP/data" "$TMP/home" "$TMP/rings"
"$TARGET/debug/namesrv" --listen "127.0.0.1:$NS" > "$TMP/namesrv.out" 2>&1 &
PIDS+=($!)
wait_for "$TMP/namesrv.out" "namesrv listening on" "${PIDS[-1]}" 30
"$TARGET/debug/broker" --cores 1 --profile small --listen "127.0.0.1:$BROKER" --namesrv "127.0.0.1:$NS" \
  --data-dir "$TMP/data" --tail-ring-dir "$TMP/rings" > "$TMP/broker.out" 2>&1 &
PIDS+=($!)
wait_for "$TMP/broker.out" "broker listening on" "${PIDS[-1]}" 60

TOOLS_CP="$(cat "$ROOT/tests/rocketmq-diff/client5/cp.txt")"
# create_topic NAME: Apache's mqadmin updateTopic -c DefaultCluster, retried until the broker
# has registered.
create_topic() {
  local try
  for try in $(seq 30); do
    java -Xmx128m -Duser.home="$TMP/home" -cp "$TOOLS_CP" org.apache.rocketmq.tools.command.MQAdminStartup \
      updateTopic -n "127.0.0.1:$NS" -c DefaultCluster -t "$1" -r 4 -w 4 > "$TMP/updateTopic.out" 2>&1 || true
    grep -q 'create topic to .* success' "$TMP/updateTopic.out" && break
    [ "$try" -lt 30 ] || { cat "$TMP/updateTopic.out" >&2; exit 1; }
    sleep 1
  done
  echo "== $1 created on corvus"
}
create_topic ProxyTopic
[ "$CLUSTER_TOPIC" = 0 ] || create_topic DefaultCluster

cat > "$TMP/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "DefaultCluster",
  "namesrvAddr": "127.0.0.1:$NS",
  "proxyMode": "cluster",
  "grpcServerPort": $GRPC,
  "remotingListenPort": $REMOTING
}
EOF
t0=$SECONDS
ROCKETMQ_HOME="$TMP/home" java -Xms128m -Xmx256m -XX:TieredStopAtLevel=1 -Duser.home="$TMP/home" \
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
  --add-opens=java.base/java.lang=ALL-UNNAMED \
  -cp "$(cat "$HERE/server/cp.txt")" org.apache.rocketmq.proxy.ProxyStartup \
  -pc "$TMP/rmq-proxy.json" -pm cluster > "$TMP/proxy.out" 2>&1 &
PROXY=$!; PIDS+=("$PROXY")
proxy_up=0
for _ in $(seq 900); do
  if ! kill -0 "$PROXY" 2>/dev/null; then break; fi
  if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$GRPC)))" 2>/dev/null; then
    proxy_up=1; break
  fi
  sleep 0.1
done
proxy_log="$TMP/home/logs/rocketmqlogs/proxy.log"
if [ "$proxy_up" = 0 ]; then
  echo "== the Proxy did not start (it $(kill -0 "$PROXY" 2>/dev/null && echo 'is still starting after 90 s' || echo 'exited')):"
  tail -20 "$TMP/proxy.out"
  [ ! -f "$proxy_log" ] || grep -E "ERROR|Exception" "$proxy_log" | head -20
  exit 1
fi
echo "== the Proxy listens for gRPC after $((SECONDS - t0)) s"

status=0
timeout 180 java -Xmx128m -Duser.home="$TMP/home" -cp "$HERE/target/classes:$(cat "$HERE/cp.txt")" \
  corvus.proxy.GrpcProducer "127.0.0.1:$GRPC" ProxyTopic 3 > "$TMP/producer.out" 2> "$TMP/producer.err" || status=$?
echo "== the gRPC producer (exit $status):"
grep -E '^(SENT|OK|FAILED|ALL|NOT|received)' "$TMP/producer.out" || true
echo "== the Proxy's errors:"
[ ! -f "$proxy_log" ] || grep -E "ERROR|WARN.*(failed|Exception)" "$proxy_log" | sed 's/^\(.\{400\}\).*/\1.../' | head -30 || true
exit $status
