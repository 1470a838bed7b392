#!/usr/bin/env bash
# The differential harness: the scenario program (src/, Apache's RocketMQ Java client 4.9.8 and
# 5.3.3) against Apache RocketMQ 5.3.3 and against corvus, on this machine, then diff.py compares
# the normalised transcripts, minus the differences known-differences.txt explains.
#
#   tests/rocketmq-diff/run.sh [--brokers rocketmq,corvus] [--clients 4,5]
#                              [--scenarios all|short|NAME,NAME...] [--out DIR] [--record]
#                              [--no-build]
#
# --record: also writes Apache RocketMQ's transcripts of the short set (scenarios.txt) to
# expected/rocketmq-5.3.3-c4.txt and -c5.txt, which tests/tests/rocketmq_diff.rs compares
# corvus against in CI. --no-build: use corvus's target/debug binaries as they are.
# Exit status: 0 when every difference is explained, 1 otherwise (the report says which).
#
# Needs java 17+, mvn (Maven Central for the first fetch) and cargo. Apache RocketMQ's
# NameServer and broker come from Maven Central with bench/rocketmq-compare/pom.xml (a
# classpath, no build), start as bench/rocketmq-compare/run.sh starts them but with small heaps
# and 64 MiB commit-log files, and run in a temporary directory that is removed afterwards.
# Both brokers get the same RocketMQ broker.conf (corvus reads RocketMQ's keys). As root, the
# runs happen in a network namespace of their own with only the loopback device (`unshare -n`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BROKERS="rocketmq,corvus"
CLIENTS="4,5"
SCENARIOS="all"
OUT=""
RECORD=0
BUILD=1
INNER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --brokers) BROKERS="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --scenarios) SCENARIOS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --record) RECORD=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --inner) INNER=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="$TARGET/rocketmq-diff"
RMQ_CP="$WORK/rocketmq-cp.txt"
# fetch_rocketmq, free_port, wait_for, stop_pid, stop_all, write_conf, start_rocketmq.
source "$HERE/apache-lib.sh"

# The scenario names of a set: every scenario, the short set, or a comma-separated list.
scenario_names() {
  case "$1" in
    all) awk '!/^#/ && NF {print $1}' "$HERE/scenarios.txt" ;;
    short) awk '!/^#/ && $2 == "short" {print $1}' "$HERE/scenarios.txt" ;;
    *) tr ',' '\n' <<< "$1" ;;
  esac
}

if [ "$INNER" = 0 ]; then
  command -v java >/dev/null && command -v mvn >/dev/null || { echo "needs java and mvn" >&2; exit 1; }
  mkdir -p "$WORK"
  for v in ${CLIENTS//,/ }; do
    echo "== building the scenario program against the $v.x client (tests/rocketmq-diff/client$v)"
    maven_cp "$HERE/client$v" compile
  done
  [[ ",$BROKERS," != *,rocketmq,* ]] || fetch_rocketmq
  if [[ ",$BROKERS," == *,corvus,* ]] && [ "$BUILD" = 1 ]; then
    echo "== building corvus (debug: broker, namesrv)"
    (cd "$ROOT" && nice -n 10 cargo build -q -p broker -p namesrv)
  fi
  [ -n "$OUT" ] || OUT="$WORK/run-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT"
  ARGS=(--brokers "$BROKERS" --clients "$CLIENTS" --scenarios "$SCENARIOS" --out "$OUT")
  [ "$RECORD" = 0 ] || ARGS+=(--record)
  export CARGO_TARGET_DIR="$TARGET"
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
    # Only loopback from here on: RocketMQ's HA port binds to the wildcard address.
    exec unshare -n -- bash -c 'ip link set lo up && exec bash "$0" --inner "$@"' "$0" "${ARGS[@]}"
  fi
  exec bash "$0" --inner "${ARGS[@]}"
fi

# --- The runs (inside the namespace where there is one). ---
TMP="$(mktemp -d /tmp/rmq-diff.XXXXXX)"
SHM="$(mktemp -d /dev/shm/rmq-diff.XXXXXX)"
PIDS=()
cleanup() {
  stop_all
  rm -rf "$TMP" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_corvus() {
  local dir="$1" nsport="$2" port="$3"
  mkdir -p "$dir/store" "$SHM/$(basename "$dir")"
  write_conf "$dir" "$nsport" "$port"
  "$TARGET/debug/namesrv" --listen "127.0.0.1:$nsport" > "$dir/namesrv.out" 2>&1 &
  NS_PID=$!; PIDS+=("$NS_PID")
  wait_for "$dir/namesrv.out" "namesrv listening on" "$NS_PID" 30
  "$TARGET/debug/broker" --cores 1 --profile small --config "$dir/broker.conf" \
    --tail-ring-dir "$SHM/$(basename "$dir")" > "$dir/broker.out" 2>&1 &
  BROKER_PID=$!; PIDS+=("$BROKER_PID")
  wait_for "$dir/broker.out" "broker listening on" "$BROKER_PID" 60
}

mapfile -t NAMES < <(scenario_names "$SCENARIOS")
echo "== scenarios: ${NAMES[*]}"
for broker in ${BROKERS//,/ }; do
  dir="$TMP/$broker"
  mkdir -p "$dir"
  nsport=$(free_port); port=$(free_port)
  t0=$SECONDS
  echo "== starting $broker"
  if [ "$broker" = rocketmq ]; then start_rocketmq "$dir" "$nsport" "$port"; else start_corvus "$dir" "$nsport" "$port"; fi
  echo "== $broker started in $((SECONDS - t0)) s"
  for v in ${CLIENTS//,/ }; do
    t1=$SECONDS
    cp_file="$HERE/client$v/cp.txt"
    # Each client's run has its own tag in every topic and group name, so the runs of both
    # clients share the broker without sharing state; the tag never reaches the transcript.
    ROCKETMQ_HOME="$dir/home" timeout 900 java -Xmx256m -XX:TieredStopAtLevel=1 \
      -Duser.home="$dir/client$v" -Drocketmq.client.logRoot="$dir/client$v/logs" \
      -cp "$HERE/client$v/target/classes:$(cat "$cp_file")" corvus.diff.Diff \
      "127.0.0.1:$nsport" "_c$v" "${NAMES[@]}" > "$OUT/$broker-c$v.txt" 2> "$OUT/$broker-c$v.err" ||
      echo "the $v.x client's run against $broker exited non-zero (see $OUT/$broker-c$v.err)"
    echo "== $broker, $v.x client: $(wc -l < "$OUT/$broker-c$v.txt") lines in $((SECONDS - t1)) s"
  done
  # RocketMQ's store refuses every write (SERVICE_NOT_AVAILABLE, 14) while the disk is over
  # 90% full, whatever broker.conf says (it caps the level at 0.90); the disk is shared.
  if grep -qs "mark disk full" "$dir/home/logs/rocketmqlogs/store.log"; then
    echo "WARNING: Apache RocketMQ marked its disk full during the run (the filesystem passed 90% use):"
    echo "WARNING: its transcripts show code 14 where it would have worked; run again with room on the disk"
  fi
  cp "$dir/broker.out" "$OUT/$broker-broker.out" 2>/dev/null || true
  [ ! -d "$dir/home/logs" ] || cp -r "$dir/home/logs" "$OUT/$broker-logs"
  stop_pid "$BROKER_PID"; stop_pid "$NS_PID"
  rm -rf "$dir" "$SHM/$broker"
done

if [ "$RECORD" = 1 ]; then
  mkdir -p "$HERE/expected"
  mapfile -t SHORT < <(scenario_names short)
  for v in ${CLIENTS//,/ }; do
    grep -E "^($(IFS='|'; echo "${SHORT[*]}")) " "$OUT/rocketmq-c$v.txt" > "$HERE/expected/rocketmq-5.3.3-c$v.txt"
    echo "recorded $HERE/expected/rocketmq-5.3.3-c$v.txt"
  done
fi

status=0
if [[ ",$BROKERS," == *,rocketmq,* && ",$BROKERS," == *,corvus,* ]]; then
  for v in ${CLIENTS//,/ }; do
    echo "== differences, $v.x client (- Apache RocketMQ 5.3.3, + corvus)"
    python3 "$HERE/diff.py" --client "$v" "$OUT/rocketmq-c$v.txt" "$OUT/corvus-c$v.txt" | tee "$OUT/diff-c$v.txt" || status=1
  done
fi
echo "transcripts in $OUT"
exit $status
