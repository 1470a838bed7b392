#!/usr/bin/env bash
# RocketMQ's own mqadmin (rocketmq-tools, tests/rocketmq-tools5) over its sub-commands, against
# Apache RocketMQ and against corvus, both prepared alike, side by side:
#
#   [RMQ_VERSION=5.3.3] [TOOLS_VERSION=5.3.3] [CORVUS_CORES=2] [CORVUS_PROFILE=small] \
#     tests/rocketmq-tools5/compare.sh [--only CMD,CMD...] [--keep] [--show]
#
# RMQ_VERSION is the Apache RocketMQ run (bench/rocketmq-compare/pom.xml from Maven Central),
# TOOLS_VERSION the mqadmin run against both; 5.3.3 each by default. 5.5.0 is the newest
# release whose NameServer, broker and tools are all on Maven Central; the sub-commands a tool
# version added run only with that tool (COMMANDS_5_5).
#
# Each side gets a NameServer and one broker on loopback (Apache's with small heaps and
# tests/rocketmq-diff/broker.conf; corvus's debug binaries, CORVUS_CORES cores (2; each core
# is a broker in the routes, so listings have a row per core) and the CORVUS_PROFILE tuning
# profile (small: 4 MiB CommitLog segments), the same broker.conf),
# a topic of 8 queues (AdminTopic), and corvus.AdminPrepare (tests/rocketmq-java533): 100
# messages with keys and tags, an offline group with a backlog of 60 (OfflineGroup), and an
# online push group (OnlineGroup) that stays connected while the commands run. Every command
# in COMMANDS below then runs against each side, and one line per command says:
#   same     both succeeded and printed the same once addresses, broker names, ids and
#            times are masked (see normalise)
#   differs  both succeeded with different output (--show prints the first lines of each)
#   fails    corvus failed where Apache succeeded (the reason follows)
#   both-fail / apache-fails
# The table ends with the counts. Exit 0 whatever the outcome: it is a report, not a test.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ONLY=""
KEEP=0
SHOW=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=",$2,"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --show) SHOW=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
RMQ_VERSION="${RMQ_VERSION:-5.3.3}"
TOOLS_VERSION="${TOOLS_VERSION:-5.3.3}"
CORVUS_CORES="${CORVUS_CORES:-2}"
CORVUS_PROFILE="${CORVUS_PROFILE:-small}"
RMQ_CP="$TARGET/rocketmq-diff/rocketmq-cp.txt"
# maven_cp, fetch_rocketmq, stop_all_on_exit, free_port, wait_for, start_rocketmq.
source "$ROOT/tests/rocketmq-diff/apache-lib.sh"
# The tool's classpath: cp.txt (what tests/tests/rocketmq_admin5.rs runs) for 5.3.3, its own
# file for another version.
TOOLS_CP_FILE="$HERE/cp.txt"
[ "$TOOLS_VERSION" = 5.3.3 ] || TOOLS_CP_FILE="$TARGET/rocketmq-tools5/cp-$TOOLS_VERSION.txt"
mkdir -p "$TARGET/rocketmq-tools5"
(cd "$HERE" && mvn -q -B dependency:build-classpath -Dtools.version="$TOOLS_VERSION" \
  -Dmdep.outputFile="$TOOLS_CP_FILE")
maven_cp "$ROOT/tests/rocketmq-java533" compile
fetch_rocketmq
(cd "$ROOT" && cargo build -q -p broker -p namesrv)
TOOLS_CP="$(cat "$TOOLS_CP_FILE")"
echo "== Apache RocketMQ $RMQ_VERSION and corvus $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') ($CORVUS_CORES cores, profile $CORVUS_PROFILE), mqadmin $TOOLS_VERSION"
PREP_CP="$ROOT/tests/rocketmq-java533/target/classes:$(cat "$ROOT/tests/rocketmq-java533/cp.txt")"

TMP="$(mktemp -d /tmp/rmq-admin.XXXXXX)"
PIDS=()
stop_all_on_exit

# mqadmin SIDE ARGS...: the tool against SIDE's NameServer; prints what it printed.
mqadmin() {
  local side="$1"; shift
  local ns="${NSADDR[$side]}"
  # consumerStatus writes the clients' running info under its working directory.
  (cd "$TMP/home" && ROCKETMQ_HOME="$TMP/home" timeout 60 java -Xmx128m -XX:TieredStopAtLevel=1 \
    -XX:+UseSerialGC -Duser.home="$TMP/home" -cp "$TOOLS_CP" \
    org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$ns" 2>&1)
}

declare -A NSADDR BROKER_ADDR BROKER_NAME OFFSET_ID UNIQ_ID
mkdir -p "$TMP/apache" "$TMP/corvus" "$TMP/home"

# Apache.
NS=$(free_port); PORT=$(free_port)
start_rocketmq "$TMP/apache" "$NS" "$PORT"
NSADDR[apache]="127.0.0.1:$NS"; BROKER_ADDR[apache]="127.0.0.1:$PORT"; BROKER_NAME[apache]=broker-a

# corvus.
CNS=$(free_port)
"$TARGET/debug/namesrv" --listen "127.0.0.1:$CNS" > "$TMP/corvus/namesrv.out" 2>&1 &
PIDS+=($!)
wait_for "$TMP/corvus/namesrv.out" "namesrv listening on" "${PIDS[-1]}" 30
"$TARGET/debug/broker" --cores "$CORVUS_CORES" --profile "$CORVUS_PROFILE" --listen 127.0.0.1:0 --namesrv "127.0.0.1:$CNS" \
  --data-dir "$TMP/corvus/data" --tail-ring-dir "$TMP/corvus/rings" \
  -c "$ROOT/tests/rocketmq-diff/broker.conf" > "$TMP/corvus/broker.out" 2>&1 &
PIDS+=($!)
wait_for "$TMP/corvus/broker.out" "broker listening on" "${PIDS[-1]}" 60
NSADDR[corvus]="127.0.0.1:$CNS"
BROKER_ADDR[corvus]="$(grep -o 'broker listening on [0-9.:]*' "$TMP/corvus/broker.out" | head -1 | awk '{print $4}')"
BROKER_NAME[corvus]=broker-a-c0
[ "$CORVUS_CORES" != 1 ] || BROKER_NAME[corvus]=broker-a

# The same topic, messages and groups on each side.
for side in apache corvus; do
  for _ in $(seq 30); do
    mqadmin "$side" updateTopic -c DefaultCluster -t AdminTopic -r 8 -w 8 | grep -q success && break
    sleep 1
  done
  for g in OfflineGroup OnlineGroup; do
    mqadmin "$side" updateSubGroup -c DefaultCluster -g "$g" > /dev/null
  done
  mkfifo "$TMP/$side/prep.in"
  java -Xmx128m -XX:TieredStopAtLevel=1 -Duser.home="$TMP/home" -cp "$PREP_CP" corvus.AdminPrepare \
    "${NSADDR[$side]}" AdminTopic < "$TMP/$side/prep.in" > "$TMP/$side/prep.out" 2>&1 &
  PIDS+=($!)
  exec {fd}> "$TMP/$side/prep.in"   # held open: the online group stays until the script ends
  wait_for "$TMP/$side/prep.out" "^READY" "${PIDS[-1]}" 120
  OFFSET_ID[$side]="$(sed -n 's/^OFFSET MSG ID //p' "$TMP/$side/prep.out")"
  UNIQ_ID[$side]="$(sed -n 's/^UNIQ MSG ID //p' "$TMP/$side/prep.out")"
done
echo "== both sides prepared"

# Each command with its arguments; @BROKER@, @BNAME@, @OFFSETID@, @UNIQID@ are filled in per
# side. Commands that change state come after those that only look.
COMMANDS=(
  "clusterList"
  "clusterList -m"
  "topicList"
  "topicList -c"
  "topicRoute -t AdminTopic"
  "topicStatus -t AdminTopic"
  "topicClusterList -t AdminTopic"
  "allocateMQ -t AdminTopic -i 10.0.0.1,10.0.0.2"
  "statsAll"
  "statsAll -t AdminTopic"
  "brokerStatus -b @BROKER@"
  "getBrokerConfig -b @BROKER@"
  "brokerConsumeStats -b @BROKER@"
  "consumerProgress"
  "consumerProgress -g OfflineGroup"
  "consumerProgress -g OnlineGroup"
  "consumerConnection -g OnlineGroup"
  "consumerStatus -g OnlineGroup"
  "producerConnection -g AdminProducer -t AdminTopic"
  "producer -b @BROKER@"
  "getConsumerConfig -g OnlineGroup"
  "queryMsgById -i @OFFSETID@"
  "queryMsgByUniqueKey -i @UNIQID@ -t AdminTopic"
  "queryMsgByKey -t AdminTopic -k key-7"
  "queryMsgByOffset -t AdminTopic -b @BNAME@ -i 0 -o 0"
  "queryCq -t AdminTopic -q 0 -i 0 -c 3 -b @BROKER@"
  "printMsg -t AdminTopic -c UTF-8 -s 0"
  "printMsgByQueue -t AdminTopic -a @BNAME@ -i 0"
  "haStatus -c DefaultCluster"
  "getNamesrvConfig"
  "getColdDataFlowCtrInfo -b @BROKER@"
  "listUser -b @BROKER@"
  "listAcl -b @BROKER@"
  "checkMsgSendRT -t AdminTopic -a 3 -s 64"
  "sendMessage -t AdminTopic -p hello -k k1 -c TagA"
  "consumeMessage -t AdminTopic -c 3"
  "updateTopic -c DefaultCluster -t AdminNewTopic -r 2 -w 2"
  "updateTopicPerm -c DefaultCluster -t AdminNewTopic -p 4"
  "deleteTopic -c DefaultCluster -t AdminNewTopic"
  "updateSubGroup -c DefaultCluster -g AdminNewGroup"
  "deleteSubGroup -c DefaultCluster -g AdminNewGroup"
  "cloneGroupOffset -s OfflineGroup -d CloneGroup -t AdminTopic"
  "resetOffsetByTime -g OfflineGroup -t AdminTopic -s now"
  "skipAccumulatedMessage -g OfflineGroup -t AdminTopic"
  "setConsumeMode -c DefaultCluster -t AdminTopic -g OfflineGroup -m POP -q 0"
  "updateBrokerConfig -b @BROKER@ -k maxMessageSize -v 4194304"
  "updateKvConfig -s AdminNs -k k1 -v v1"
  "deleteKvConfig -s AdminNs -k k1"
  "updateOrderConf -t AdminTopic -m get"
  "wipeWritePerm -b @BNAME@"
  "addWritePerm -b @BNAME@"
  "cleanExpiredCQ -b @BROKER@"
  "deleteExpiredCommitLog -b @BROKER@"
  "cleanUnusedTopic -b @BROKER@"
  "exportMetadata -c DefaultCluster -f @DIR@"
  "exportConfigs -c DefaultCluster -f @DIR@"
  "exportMetrics -c DefaultCluster -f @DIR@"
)
# Sub-commands RocketMQ's mqadmin 5.5.0 added (its lite-topic commands, 5.5's LiteTopic
# feature, are not among them here).
COMMANDS_5_5=(
  "switchTimerEngine -b @BROKER@ -e F"
)
if [ "$(printf '%s\n' 5.5.0 "$TOOLS_VERSION" | sort -V | head -1)" = 5.5.0 ]; then
  COMMANDS+=("${COMMANDS_5_5[@]}")
fi

# Masks what differs between any two runs: addresses, broker names, ids, numbers that are
# times, the 5.x version a broker reports (V5_3_3, V5_5_0), and white space.
normalise() {
  sed -E \
    -e 's/[0-9]{1,3}(\.[0-9]{1,3}){3}(:[0-9]+)?/ADDR/g' \
    -e 's/broker-a(-c[0-9]+)?/BROKER/g' \
    -e 's/V5_[0-9]+_[0-9]+/V5_X_Y/g' \
    -e 's/[0-9A-F]{32}/MSGID/g' \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:,.]+/TIME/g' \
    -e 's/[0-9]{10,}/NUM/g' \
    -e 's/[[:space:]]+/ /g' -e 's/ $//' \
    | grep -v '^$' | sort
}

failed() { grep -qE 'Exception|not supported|Usage:|error:' <<< "$1"; }

declare -A COUNT=([same]=0 [differs]=0 [fails]=0 [both-fail]=0 [apache-fails]=0)
show_head() { head -c 400 | tr '\n' '|'; }
printf '%-14s %s\n' "result" "command"
for c in "${COMMANDS[@]}"; do
  name="${c%% *}"
  if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then continue; fi
  declare -A OUT=()
  declare -A OK=()
  for side in apache corvus; do
    mkdir -p "$TMP/$side/export"
    args="${c//@BROKER@/${BROKER_ADDR[$side]}}"
    args="${args//@BNAME@/${BROKER_NAME[$side]}}"
    args="${args//@OFFSETID@/${OFFSET_ID[$side]}}"
    args="${args//@UNIQID@/${UNIQ_ID[$side]}}"
    args="${args//@DIR@/$TMP/$side/export}"
    # shellcheck disable=SC2086
    out="$(mqadmin "$side" $args || true)"
    # The side's own directory (export files) is not a difference.
    OUT[$side]="${out//$TMP\/$side/TMPDIR}"
    if failed "$out"; then OK[$side]=0; else OK[$side]=1; fi
  done
  if [ "${OK[apache]}" = 1 ] && [ "${OK[corvus]}" = 1 ]; then
    if [ "$(normalise <<< "${OUT[apache]}")" = "$(normalise <<< "${OUT[corvus]}")" ]; then
      r=same
    else
      r=differs
    fi
  elif [ "${OK[apache]}" = 1 ]; then
    r=fails
  elif [ "${OK[corvus]}" = 1 ]; then
    r=apache-fails
  else
    r=both-fail
  fi
  COUNT[$r]=$(( ${COUNT[$r]} + 1 ))
  why=""
  if [ "$r" = fails ] || [ "$r" = both-fail ]; then
    why="  ($(grep -m1 -E 'Exception|not supported|Usage:|error:' <<< "${OUT[corvus]}" | cut -c1-140))"
  fi
  printf '%-14s %s%s\n' "$r" "$c" "$why"
  if [ "$SHOW" = 1 ] && [ "$r" = differs ]; then
    a_head="$(show_head <<< "${OUT[apache]}")"
    c_head="$(show_head <<< "${OUT[corvus]}")"
    echo "   apache: $a_head"
    echo "   corvus: $c_head"
  fi
done
both="${COUNT[both-fail]}"
apache_only="${COUNT[apache-fails]}"
echo "== same ${COUNT[same]}, differs ${COUNT[differs]}, fails ${COUNT[fails]}, both fail $both, apache fails $apache_only"
