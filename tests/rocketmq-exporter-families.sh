#!/usr/bin/env bash
# Runs Apache's rocketmq-exporter, built from its repository with Maven, against a corvus
# NameServer, a broker (2 cores) and its slave on loopback, with the clients a monitored
# cluster has: a Java producer in a producer group sending to a topic and a Java push
# consumer group reading it that fails some messages (so the group's retry and dead letter
# topics fill), beside a slow one (a growing backlog), and prints which of the exporter's
# metric families have values.
#
#   tests/rocketmq-exporter-families.sh EXPORTER_CHECKOUT [SECONDS]
#
# EXPORTER_CHECKOUT: a checkout of github.com/apache/rocketmq-exporter (built here with
# `mvn package -DskipTests` unless its exec jar is there). SECONDS (default 100): how long the
# exporter runs; it collects at second 15 of each minute, so give it at least 80. Needs java,
# mvn (the clients are tests/rocketmq-java's ExporterLoad, built offline from the local Maven
# repository), curl and the corvus binaries (`cargo build -p broker -p namesrv -p mqadmin`;
# set CORVUS_BIN to their directory, default target/debug). KEEP_LOGS=DIR copies the logs
# (NameServer, brokers, clients, exporter) and the scrape there. Everything it starts is
# stopped at exit, by process id.
#
# Three families never have values from this exporter, against any broker: it fills
# rocketmq_group_consume_tps and rocketmq_group_consume_total_offset nowhere (the calls are
# commented out), and skips %DLQ% topics before it would fill rocketmq_group_dlqdiff.
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
ns_port=$(port); broker_port=$(port); slave_port=$(port); http_port=$(port); grpc_port=$(port)
ns=127.0.0.1:$ns_port

if ! (cd "$root/tests/rocketmq-java" &&
    mvn -q -B -o compile dependency:build-classpath -Dmdep.outputFile=cp.txt) >"$work/mvn.log" 2>&1; then
    cat "$work/mvn.log" >&2
    exit 1
fi
cp="$root/tests/rocketmq-java/target/classes:$(cat "$root/tests/rocketmq-java/cp.txt")"

"$bin/namesrv" --listen "$ns" >"$work/ns.log" 2>&1 & pids+=($!)
"$bin/broker" --listen "127.0.0.1:$broker_port" --cores 2 --name broker-a \
    --data-dir "$work/data" --namesrv "$ns" >"$work/broker.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
    grep -q "broker listening on" "$work/broker.log" && break
    sleep 0.1
done
# The slave of broker-a (broker id 1), for the master/slave CommitLog difference.
ha=$(sed -n 's/.*broker replication on \([0-9.:]*\).*/\1/p' "$work/broker.log" | head -1)
printf 'broker_role = "SLAVE"\nbroker_id = 1\nha_master_address = "%s"\n' "$ha" >"$work/slave.toml"
"$bin/broker" --listen "127.0.0.1:$slave_port" --cores 2 --name broker-a \
    --data-dir "$work/slave-data" --namesrv "$ns" --config "$work/slave.toml" \
    >"$work/slave.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
    grep -q "broker listening on" "$work/slave.log" && break
    sleep 0.1
done
"$bin/mqadmin" update-topic -n "$ns" -t ExporterTopic -q 8 >/dev/null

# A producer in ExporterProducerGroup sending 2 messages a second, ExporterGroup's push
# consumer failing every 5th message twice (to %RETRY%ExporterGroup, then %DLQ%ExporterGroup),
# and ExporterGroupSlow's taking a second a message (a growing backlog), for as long as the
# run.
java -cp "$cp" corvus.ExporterLoad "$ns" ExporterTopic ExporterGroup ExporterProducerGroup \
    "$((seconds + 60))" 2 5 >"$work/load.log" 2>&1 & pids+=($!)

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
if [ -n "${KEEP_LOGS:-}" ]; then
    mkdir -p "$KEEP_LOGS" && cp "$work"/*.log "$work/scrape.txt" "$KEEP_LOGS"/
fi
