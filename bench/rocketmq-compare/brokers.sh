# Starting and stopping the two brokers, shared by run.sh and ../omb/run.sh (sourced inside
# their network namespace). The caller sets TMP and SHM (temporary directories), PIDS=() (every
# process started, stopped by cleanup), CP (Apache RocketMQ's classpath, with mqadmin's tools),
# BIN (corvus's release binaries), FLUSH (async or sync) and IDLE_POLL (empty, or corvus's
# idle_poll_us), and traps EXIT with cleanup. CORVUS_TOML, if set in the environment, names a
# file of corvus config keys laid over the profile's (`warm_segments = true`, say).
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null || true
  done
  sleep 1
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
  done
  rm -rf "$TMP" "$SHM"
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

JAVA_RMQ=(-server -XX:+UseG1GC -XX:G1HeapRegionSize=16m -XX:G1ReservePercent=25
  -XX:InitiatingHeapOccupancyPercent=30 -XX:SoftRefLRUPolicyMSPerMB=0
  -XX:-OmitStackTraceInFastThrow -XX:-UseLargePages
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED)

mqadmin() {
  ROCKETMQ_HOME="$TMP/home" taskset -c 1 timeout 60 java -Xmx256m -Duser.home="$TMP/home" \
    -cp "$CP" org.apache.rocketmq.tools.command.MQAdminStartup "$@"
}

NS_PID=""; BROKER_PID=""; PROXY_PID=""
start_rocketmq() {
  local dir="$1" nsport="$2" port="$3"
  mkdir -p "$dir/store" "$TMP/home"
  cat > "$dir/namesrv.conf" <<EOF
listenPort=$nsport
bindAddress=127.0.0.1
EOF
  cat > "$dir/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=$([ "$FLUSH" = sync ] && echo SYNC_FLUSH || echo ASYNC_FLUSH)
autoCreateTopicEnable=true
namesrvAddr=127.0.0.1:$nsport
listenPort=$port
bindAddress=127.0.0.1
brokerIP1=127.0.0.1
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
deleteWhen=04
fileReservedTime=48
EOF
  ROCKETMQ_HOME="$TMP/home" taskset -c 0 java -Xms256m -Xmx256m "${JAVA_RMQ[@]}" \
    -Duser.home="$dir" -cp "$CP" org.apache.rocketmq.namesrv.NamesrvStartup \
    -c "$dir/namesrv.conf" > "$dir/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/namesrv.out" "boot success" "$NS_PID" 60
  ROCKETMQ_HOME="$TMP/home" taskset -c 0 java -Xms1g -Xmx1g -XX:+AlwaysPreTouch \
    -XX:MaxDirectMemorySize=8g "${JAVA_RMQ[@]}" \
    -Duser.home="$dir" -cp "$CP" org.apache.rocketmq.broker.BrokerStartup \
    -c "$dir/broker.conf" > "$dir/broker.out" 2>&1 &
  BROKER_PID=$!; PIDS+=("$BROKER_PID")
  wait_for "$dir/broker.out" "boot success" "$BROKER_PID" 120
}

start_corvus() {
  local dir="$1" nsport="$2" port="$3"
  mkdir -p "$dir/data" "$SHM/$(basename "$dir")"
  taskset -c 0 "$BIN/namesrv" --listen "127.0.0.1:$nsport" > "$dir/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/namesrv.out" "namesrv listening on" "$NS_PID" 30
  # Keys over the profile's: IDLE_POLL, and the file CORVUS_TOML names (any keys).
  local extra=()
  : > "$dir/corvus.toml"
  [ -z "$IDLE_POLL" ] || echo "idle_poll_us = $IDLE_POLL" >> "$dir/corvus.toml"
  [ -z "${CORVUS_TOML:-}" ] || cat "$CORVUS_TOML" >> "$dir/corvus.toml"
  [ ! -s "$dir/corvus.toml" ] || extra=(--config "$dir/corvus.toml")
  local profile=throughput
  [ "$FLUSH" = async ] || profile=durable
  taskset -c 0 "$BIN/broker" --cores 1 --profile "$profile" "${extra[@]}" --listen "127.0.0.1:$port" \
    --namesrv "127.0.0.1:$nsport" --data-dir "$dir/data" \
    --tail-ring-dir "$SHM/$(basename "$dir")" > "$dir/broker.out" 2>&1 &
  BROKER_PID=$!; PIDS+=("$BROKER_PID")
  wait_for "$dir/broker.out" "broker listening on" "$BROKER_PID" 60
}

# disk_ok: the filesystem of the stores stays under 70% use (used / (used + available)).
disk_ok() {
  local used avail
  read -r used avail < <(df -Pk "$TMP" | awk 'NR==2{print $3, $4}')
  [ $((used * 100)) -lt $(((used + avail) * 70)) ] ||
    { echo "disk of $TMP is at or above 70% use; no more runs" >&2; return 1; }
}
