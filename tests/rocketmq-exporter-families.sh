#!/usr/bin/env bash
# Runs Apache's rocketmq-exporter, built from its repository with Maven, against a corvus
# NameServer and broker (2 cores) on loopback, with a topic, a sender of one message a second
# and a group reading it, and prints which of the exporter's metric families have values.
#
#   tests/rocketmq-exporter-families.sh EXPORTER_CHECKOUT [SECONDS]
#
# EXPORTER_CHECKOUT: a checkout of github.com/apache/rocketmq-exporter (built here with
# `mvn package -DskipTests` unless its exec jar is there). SECONDS (default 100): how long the
# exporter runs; it collects at second 15 of each minute, so give it at least 80. Needs java,
# mvn, curl and the corvus binaries (`cargo build -p broker -p namesrv -p mqadmin`; set
# CORVUS_BIN to their directory, default target/debug). Everything it starts is stopped at
# exit, by process id.
set -euo pipefail

checkout=${1:?usage: $0 EXPORTER_CHECKOUT [SECONDS]}
seconds=${2:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CORVUS_BIN:-$root/target/debug}
work=$(mktemp -d)
pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

jar=$(ls "$checkout"/target/rocketmq-exporter-*-exec.jar 2>/dev/null | head -1 || true)
if [ -z "$jar" ]; then
    (cd "$checkout" && mvn -q -B -DskipTests -Drat.skip=true -Dcheckstyle.skip=true package)
    jar=$(ls "$checkout"/target/rocketmq-exporter-*-exec.jar | head -1)
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ns_port=$(port); broker_port=$(port); http_port=$(port); grpc_port=$(port)
ns=127.0.0.1:$ns_port

"$bin/namesrv" --listen "$ns" >"$work/ns.log" 2>&1 & pids+=($!)
"$bin/broker" --listen "127.0.0.1:$broker_port" --cores 2 --name broker-a \
    --data-dir "$work/data" --namesrv "$ns" >"$work/broker.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
    grep -q "broker listening on" "$work/broker.log" && break
    sleep 0.1
done
"$bin/mqadmin" update-topic -n "$ns" -t ExporterTopic -q 8 >/dev/null

# One message a second, and a read by ExporterGroup every 10 s, for as long as the run.
(
    for i in $(seq 1 "$seconds"); do
        "$bin/mqadmin" send -n "$ns" -t ExporterTopic -p "m$i" -k "k$i" -c TagA >/dev/null 2>&1 || true
        if [ $((i % 10)) -eq 0 ]; then
            "$bin/mqadmin" consume -n "$ns" -t ExporterTopic -g ExporterGroup --from first \
                --max 1000 --timeout-ms 2000 >/dev/null 2>&1 || true
        fi
        sleep 1
    done
) & pids+=($!)

java -jar "$jar" --server.port="$http_port" --grpc.server.port="$grpc_port" \
    --rocketmq.config.namesrvAddr="$ns" >"$work/exporter.log" 2>&1 & pids+=($!)
sleep "$seconds"

curl -s "http://127.0.0.1:$http_port/metrics" >"$work/scrape.txt"
grep -rhoE '"rocketmq_[a-z0-9_]+"' "$checkout/src/main/java" | tr -d '"' | sort -u >"$work/all.txt"
grep -v '^#' "$work/scrape.txt" | sed 's/{.*//; s/ .*//' | sort -u >"$work/valued.txt"
echo "families with values: $(comm -12 "$work/all.txt" "$work/valued.txt" | wc -l) of $(wc -l <"$work/all.txt")"
echo "--- with values"
comm -12 "$work/all.txt" "$work/valued.txt"
echo "--- without values"
comm -23 "$work/all.txt" "$work/valued.txt"
