#!/usr/bin/env bash
# Records what corvus must match: the RocketMQ 5 gRPC SDK scenarios (corvus.v5.Scenarios,
# rocketmq-client-java 5.0.8) against Apache RocketMQ 5.3.3 and its Proxy, on this machine.
#
#   tests/rocketmq-v5/run-apache.sh [--scenarios all|NAME,NAME...] [--keep] [--no-record|--check]
#
# Starts Apache RocketMQ 5.3.3's NameServer and broker (tests/rocketmq-diff/apache-lib.sh: small
# heaps, loopback, tests/rocketmq-diff/broker.conf plus broker.conf here; POP and the timer
# wheel as 5.3.3 has them) and Apache's Proxy in cluster mode (tests/rocketmq-proxy/server's
# classpath), creates each scenario's topic with its message.type and the consumer groups
# (Apache's mqadmin 5.3.3, tests/rocketmq-tools5), runs every scenario against the Proxy's
# gRPC port and writes each transcript to expected/<scenario>.txt (--no-record: only prints
# them; --check: compares them with expected/ instead, to see that Apache's are stable).
# Exit 0 when every scenario passed (and, with --check, matched). Every process is stopped by
# its pid and the temporary directory removed (--keep keeps it: the broker's and the Proxy's
# logs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SCENARIOS="all"
KEEP=0
RECORD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --scenarios) SCENARIOS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-record) RECORD=0; shift ;;
    --check) RECORD=check; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

# The scenarios, with their topics' message types and groups (Scenarios.TOPICS holds the same
# topic names; the group of topic T is TGroup).
ALL=(produce fifo delay delay-receive transaction-send transaction simple push fifo-push share recall)
declare -A TOPIC=([produce]=V5Normal [fifo]=V5Fifo [delay]=V5Delay [delay-receive]=V5DelayRecv
  [transaction-send]=V5TxnSend [transaction]=V5Txn [simple]=V5Simple [push]=V5Push
  [fifo-push]=V5FifoPush [share]=V5Share [recall]=V5Recall)
declare -A TYPE=([produce]=NORMAL [fifo]=FIFO [delay]=DELAY [delay-receive]=DELAY
  [transaction-send]=TRANSACTION [transaction]=TRANSACTION [simple]=NORMAL [push]=NORMAL
  [fifo-push]=FIFO [share]=NORMAL [recall]=DELAY)
if [ "$SCENARIOS" = all ]; then NAMES=("${ALL[@]}"); else IFS=, read -r -a NAMES <<< "$SCENARIOS"; fi
for s in "${NAMES[@]}"; do [ -n "${TOPIC[$s]:-}" ] || { echo "unknown scenario $s" >&2; exit 2; }; done

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
RMQ_CP="$TARGET/rocketmq-diff/rocketmq-cp.txt"
BROKER_CONFS=("$ROOT/tests/rocketmq-diff/broker.conf" "$HERE/broker.conf")
# maven_cp, fetch_rocketmq, stop_all_on_exit, free_port, wait_for, start_rocketmq, start_proxy.
source "$ROOT/tests/rocketmq-diff/apache-lib.sh"
maven_cp "$HERE" compile
maven_cp "$ROOT/tests/rocketmq-proxy/server"
maven_cp "$ROOT/tests/rocketmq-tools5"
fetch_rocketmq

TMP="$(mktemp -d /tmp/rmq-v5.XXXXXX)"
PIDS=()
stop_all_on_exit

NS=$(free_port); PORT=$(free_port); GRPC=$(free_port); REMOTING=$(free_port)
t0=$SECONDS
start_rocketmq "$TMP" "$NS" "$PORT"
echo "== Apache RocketMQ 5.3.3 started in $((SECONDS - t0)) s"

TOOLS_CP="$(cat "$ROOT/tests/rocketmq-tools5/cp.txt")"
# mqadmin ARGS...: Apache's mqadmin 5.3.3 against this NameServer, retried (at most 30 times,
# a second apart) until it says it created what it was asked to on a broker: right after its
# start the broker may not have registered yet, and mqadmin -c then does nothing.
mqadmin() {
  local out try
  for try in $(seq 30); do
    out=$(ROCKETMQ_HOME="$TMP/home" java -Xmx128m -XX:TieredStopAtLevel=1 -Duser.home="$TMP/home" -cp "$TOOLS_CP" \
      org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "127.0.0.1:$NS" 2>&1) || true
    grep -q 'create .* success' <<< "$out" && return 0
    sleep 1
  done
  echo "mqadmin $*: $out" >&2; return 1
}
t0=$SECONDS
for s in "${NAMES[@]}"; do
  mqadmin updateTopic -c DefaultCluster -t "${TOPIC[$s]}" -r 4 -w 4 -a "+message.type=${TYPE[$s]}"
done
# push: the failing message is delivered 3 times (retryMaxTimes 2), then goes to the DLQ;
# fifo-push: an orderly group (the Proxy tells the SDK the group is FIFO).
[[ " ${NAMES[*]} " != *" push "* ]] || mqadmin updateSubGroup -c DefaultCluster -g V5PushGroup -r 2
[[ " ${NAMES[*]} " != *" fifo-push "* ]] || mqadmin updateSubGroup -c DefaultCluster -g V5FifoPushGroup -o true
echo "== topics and groups created in $((SECONDS - t0)) s"

t0=$SECONDS
start_proxy "$TMP" "$NS" "$GRPC" "$REMOTING" "$ROOT/tests/rocketmq-proxy/server/cp.txt"
echo "== Apache's Proxy listens for gRPC on 127.0.0.1:$GRPC after $((SECONDS - t0)) s"

CLIENT_CP="$HERE/target/classes:$(cat "$HERE/cp.txt")"
status=0
mkdir -p "$TMP/client" "$TMP/out"
for s in "${NAMES[@]}"; do
  t1=$SECONDS
  rc=0
  timeout 300 java -Xmx128m -XX:TieredStopAtLevel=1 -Duser.home="$TMP/client" \
    -cp "$CLIENT_CP" corvus.v5.Scenarios "127.0.0.1:$GRPC" "$s" > "$TMP/out/$s.txt" 2> "$TMP/out/$s.err" || rc=$?
  echo "== $s: exit $rc in $((SECONDS - t1)) s"
  sed 's/^/   /' "$TMP/out/$s.txt"
  grep '^note:' "$TMP/out/$s.err" | sed 's/^/   /' || true
  if [ "$rc" = 0 ]; then
    case "$RECORD" in
      1) mkdir -p "$HERE/expected"; cp "$TMP/out/$s.txt" "$HERE/expected/$s.txt" ;;
      check) diff -u "$HERE/expected/$s.txt" "$TMP/out/$s.txt" | sed 's/^/   /' || { echo "   differs from expected/$s.txt"; status=1; } ;;
    esac
  else
    status=1
    tail -20 "$TMP/out/$s.err" | sed 's/^/   err: /'
  fi
done
proxy_log="$TMP/proxy-home/logs/rocketmqlogs/proxy.log"
if [ "$status" != 0 ] && [ -f "$proxy_log" ]; then
  echo "== the Proxy's errors:"
  grep -E "ERROR|WARN.*(failed|Exception)" "$proxy_log" | sed 's/^\(.\{400\}\).*/\1.../' | head -30 || true
fi
exit $status
