# Shell functions the harnesses that run Apache RocketMQ (5.3.3 unless RMQ_VERSION says
# otherwise) beside corvus share (run.sh
# here, tests/rocketmq-v5/run-apache.sh, tests/rocketmq-tools5/compare.sh,
# tests/rocketmq-proxy/run.sh): the Maven classpaths, starting Apache's NameServer, broker and
# Proxy on loopback with small heaps, and stopping what was started. Source it after setting:
#   PIDS     an array; every process started is appended (stop_all stops them)
#   RMQ_CP   a file holding Apache RocketMQ's classpath (fetch_rocketmq writes it)
#   RMQ_VERSION  (optional) the Apache RocketMQ version to run, 5.3.3 when unset; one whose
#            NameServer, broker, tools, client and Proxy are all on Maven Central (5.5.0 is;
#            5.5.1 has only its broker there)
#   BROKER_CONFS  (optional) the broker.conf files to concatenate; broker.conf beside this file
#            when unset
# start_rocketmq sets NS_PID and BROKER_PID.

RMQ_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RMQ_ROOT="$(cd "$RMQ_LIB_DIR/../.." && pwd)"

# maven_cp DIR [GOAL...]: the classpath of the Maven project in DIR, written to DIR/cp.txt,
# after GOAL (compile: the project's own classes too).
maven_cp() {
  local dir="$1"; shift
  (cd "$dir" && mvn -q -B "$@" dependency:build-classpath -Dmdep.outputFile=cp.txt)
}

RMQ_VERSION="${RMQ_VERSION:-5.3.3}"
# Another version's classpath is kept in a file of its own, so harnesses running different
# versions at once do not overwrite each other's.
if [ "$RMQ_VERSION" != 5.3.3 ] && [ -n "${RMQ_CP:-}" ]; then
  RMQ_CP="${RMQ_CP%.txt}-$RMQ_VERSION.txt"
fi

# fetch_rocketmq: Apache RocketMQ RMQ_VERSION's classpath (bench/rocketmq-compare/pom.xml, no
# build) into RMQ_CP, from Maven Central the first time, again when that pom.xml changes, and
# when RMQ_CP holds another version's.
fetch_rocketmq() {
  local pom_dir="$RMQ_ROOT/bench/rocketmq-compare"
  mkdir -p "$(dirname "$RMQ_CP")"
  if [ ! -s "$RMQ_CP" ] || [ "$pom_dir/pom.xml" -nt "$RMQ_CP" ] \
    || ! grep -q "rocketmq-broker-$RMQ_VERSION.jar" "$RMQ_CP"; then
    echo "== fetching Apache RocketMQ $RMQ_VERSION (bench/rocketmq-compare/pom.xml) from Maven Central"
    (cd "$pom_dir" && timeout 900 mvn -q -B dependency:build-classpath \
      -Drocketmq.version="$RMQ_VERSION" -Dmdep.outputFile="$RMQ_CP")
  fi
}

# stop_all: stops every process in PIDS, all at once: TERM, then KILL to any still running
# 20 s later.
stop_all() {
  local p i
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    for ((i = 0; i < 200; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}

# stop_all_on_exit: when the script ends (or is interrupted), stop_all, then remove the
# directory TMP (KEEP=1 keeps it and says where).
stop_all_on_exit() {
  trap 'stop_all; if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi' EXIT
  trap 'exit 130' INT TERM
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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
  kill "$p" 2>/dev/null || return 0
  for ((i = 0; i < 300; i++)); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
}

# The broker.conf both brokers get: broker.conf here (the scenarios' settings) and this
# run's ports and directories.
write_conf() {
  local dir="$1" nsport="$2" port="$3"
  cat "${BROKER_CONFS[@]:-$RMQ_LIB_DIR/broker.conf}" - > "$dir/broker.conf" <<EOF
namesrvAddr=127.0.0.1:$nsport
listenPort=$port
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
EOF
}

JAVA_RMQ=(-server -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow -XX:TieredStopAtLevel=1
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED)

NS_PID=""; BROKER_PID=""
start_rocketmq() {
  local dir="$1" nsport="$2" port="$3"
  mkdir -p "$dir/store" "$dir/home"
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$nsport" > "$dir/namesrv.conf"
  write_conf "$dir" "$nsport" "$port"
  ROCKETMQ_HOME="$dir/home" java -Xms64m -Xmx128m "${JAVA_RMQ[@]}" -Duser.home="$dir/home" \
    -cp "$(cat "$RMQ_CP")" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" \
    > "$dir/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/namesrv.out" "boot success" "$NS_PID" 90
  ROCKETMQ_HOME="$dir/home" java -Xms256m -Xmx256m -XX:MaxDirectMemorySize=512m "${JAVA_RMQ[@]}" \
    -Duser.home="$dir/home" -cp "$(cat "$RMQ_CP")" org.apache.rocketmq.broker.BrokerStartup \
    -c "$dir/broker.conf" > "$dir/broker.out" 2>&1 &
  BROKER_PID=$!; PIDS+=("$BROKER_PID")
  wait_for "$dir/broker.out" "boot success" "$BROKER_PID" 180
}

# start_proxy DIR NSPORT GRPCPORT REMOTINGPORT SERVER_CP_FILE: Apache's Proxy 5.3.3 in cluster
# mode in front of the NameServer at NSPORT (tests/rocketmq-proxy/server's classpath), gRPC on
# GRPCPORT; returns once that port accepts (at most 120 s). Sets PROXY_PID; its log is
# DIR/proxy-home/logs/rocketmqlogs/proxy.log.
PROXY_PID=""
start_proxy() {
  local dir="$1" nsport="$2" grpc="$3" remoting="$4" cp_file="$5" i
  mkdir -p "$dir/proxy-home"
  printf '{"rocketMQClusterName": "DefaultCluster", "namesrvAddr": "127.0.0.1:%s", "proxyMode": "cluster", "grpcServerPort": %s, "remotingListenPort": %s}\n' \
    "$nsport" "$grpc" "$remoting" > "$dir/rmq-proxy.json"
  ROCKETMQ_HOME="$dir/proxy-home" java -Xms128m -Xmx256m "${JAVA_RMQ[@]}" -Duser.home="$dir/proxy-home" \
    -cp "$(cat "$cp_file")" org.apache.rocketmq.proxy.ProxyStartup \
    -pc "$dir/rmq-proxy.json" -pm cluster > "$dir/proxy.out" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID")
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$PROXY_PID" 2>/dev/null || { echo "the Proxy exited:" >&2; tail -30 "$dir/proxy.out" >&2; return 1; }
    python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$grpc)))" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "the Proxy did not listen on $grpc within 120 s" >&2; tail -30 "$dir/proxy.out" >&2; return 1
}
