#!/usr/bin/env bash
# Catch-up rate of a slave started after its master already holds a backlog: a NameServer
# and an ASYNC_MASTER (1 core, CPU 0), `bench produce` writes BACKLOG_MIB of 1 KiB
# messages to the master, then a slave (1 core, CPU 1) starts empty and the script polls
# `mqadmin ha-status` until the slave is in sync with 0 bytes behind. Prints the backlog,
# the time and the rate. Usage: bench/replication/catchup.sh [BACKLOG_MIB] [extra master
# TOML, e.g. the flow control keys]
set -euo pipefail
cd "$(dirname "$0")/../.."
BACKLOG_MIB=${1:-2048}
EXTRA=${2:-}
cargo build --release -q -p broker -p namesrv -p mqadmin -p bench
BIN=target/release
DIR=$(mktemp -d /tmp/corvus-catchup-XXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NS=127.0.0.1:$(port)
$BIN/namesrv --listen "$NS" > "$DIR/ns.log" 2>&1 &
HA=$(port)
cat > "$DIR/master.toml" <<T
ha_listen_port = $HA
$EXTRA
T
taskset -c 0 $BIN/broker --listen 127.0.0.1:0 --namesrv "$NS" --data-dir "$DIR/master" \
    --profile throughput --cores 1 --config "$DIR/master.toml" --log-level warn > "$DIR/master.out" 2>&1 &
for _ in $(seq 100); do grep -q "broker listening on" "$DIR/master.out" && break; sleep 0.1; done
MASTER=$(sed -n 's/^broker listening on \([^ ]*\).*/\1/p' "$DIR/master.out")
for _ in $(seq 100); do $BIN/mqadmin -n "$NS" update-topic -t CatchUp -q 8 >/dev/null 2>&1 && break; sleep 0.1; done
MSGS=$((BACKLOG_MIB * 1024))
taskset -c 1 $BIN/bench produce -n "$NS" --topic CatchUp --messages "$MSGS" --size 1024 --no-disk > "$DIR/produce.txt" 2>&1 || { cat "$DIR/produce.txt" >&2; exit 1; }
grep -E "^produce " "$DIR/produce.txt" || true
cat > "$DIR/slave.toml" <<T
broker_role = "SLAVE"
broker_id = 1
ha_master_address = "127.0.0.1:$HA"
T
START=$(date +%s.%N)
taskset -c 1 $BIN/broker --listen 127.0.0.1:0 --namesrv "$NS" --data-dir "$DIR/slave" \
    --profile throughput --cores 1 --config "$DIR/slave.toml" --log-level warn > "$DIR/slave.out" 2>&1 &
for _ in $(seq 6000); do
    if $BIN/mqadmin -n "$NS" ha-status -b "$MASTER" 2>/dev/null | grep -q "IN SYNC, acknowledged [0-9]*, 0 bytes behind"; then
        END=$(date +%s.%N)
        BYTES=$($BIN/mqadmin -n "$NS" ha-status -b "$MASTER" | sed -n 's/.*acknowledged \([0-9]*\),.*/\1/p' | head -1)
        python3 -c "b=$BYTES; t=$END-$START; print(f'caught up {b/2**20:.0f} MiB in {t:.2f} s: {b/2**20/t:.0f} MiB/s')"
        exit 0
    fi
    sleep 0.05
done
echo "the slave did not catch up in 5 minutes" >&2
$BIN/mqadmin -n "$NS" ha-status -b "$MASTER" >&2 || true
exit 1
