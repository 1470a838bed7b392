#!/usr/bin/env bash
# Runs Apache's rocketmq-dashboard backend, built from its repository with Maven, against a
# corvus NameServer and broker (2 cores) on loopback, and calls each REST endpoint its pages
# call. Prints one line per call (HTTP status, whether it answered with data) and
# "N of M answer with data".
#
#   tests/rocketmq-dashboard-pages.sh DASHBOARD_CHECKOUT
#
# DASHBOARD_CHECKOUT: a checkout of github.com/apache/rocketmq-dashboard (tag
# rocketmq-dashboard-2.1.0 was used), built here with Maven, without its frontend, unless its
# jar is there. The deployment is a secured one: the broker has ACL 2.0 on (RocketMQ's
# broker.conf keys authenticationEnabled, authorizationEnabled and initAuthenticationUser,
# a super user), and the dashboard signs every request as that user
# (rocketmq.config.accessKey and secretKey), as do the clients and mqadmin. The broker
# side: topic DashTopic of 8 queues; 100 messages with keys (dash-key-N) and tags from a
# traced Java producer (tests/rocketmq-java's DashboardClients, which stays connected, with
# a traced push consumer of DashGroup); DashOffline, a group that read 40 of them and went
# away; one message a second for the charts. The dashboard collects its charts at second 0
# (brokers) and 30 (topics) of each minute, so the calls start once it has done both (about
# 1 to 2 minutes); the ACL page's calls then create, list, update and delete a user and its
# policy. Needs java, mvn, curl, python3 and the corvus binaries (`cargo build -p broker -p
# namesrv -p mqadmin`; set CORVUS_BIN to their directory, default target/debug).
#
# DASHBOARD_BROKER=apache runs Apache RocketMQ 5.3.3's NameServer and broker instead (one
# broker; tests/rocketmq-diff/apache-lib.sh, its jars from Maven Central the first time),
# with the same broker.conf, topic and clients (its mqadmin, signed as the same user,
# creates the topic and sends the ticks): what the dashboard shows of Apache's broker,
# for comparison.
#
# Everything it starts is stopped at exit, by process id. Exit status 0 when every call
# answers with data.
set -euo pipefail

checkout=$(cd "${1:?usage: $0 DASHBOARD_CHECKOUT}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CORVUS_BIN:-$root/target/debug}
against=${DASHBOARD_BROKER:-corvus}
work=$(mktemp -d)
pids=()
PIDS=()
stop() {
    exec 3>&- 2>/dev/null || true
    for p in "${pids[@]}" "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

jar=$(ls "$checkout"/target/rocketmq-dashboard-*.jar 2>/dev/null | grep -v sources | head -1 || true)
if [ -z "$jar" ]; then
    (cd "$checkout" && mvn -q -B package -DskipTests -Dskip.installnodenpm -Dskip.npm \
        -Dmaven.antrun.skip=true -Dcheckstyle.skip -Drat.skip -Djacoco.skip=true)
    jar=$(ls "$checkout"/target/rocketmq-dashboard-*.jar | grep -v sources | head -1)
fi
java_dir=$root/tests/rocketmq-java
clients_class=$java_dir/target/classes/corvus/DashboardClients.class
if [ ! -f "$clients_class" ] || [ ! -f "$java_dir/cp.txt" ] ||
    [ "$java_dir/src/main/java/corvus/DashboardClients.java" -nt "$clients_class" ]; then
    (cd "$java_dir" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=cp.txt)
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ns_port=$(port); broker_port=$(port); http_port=$(port)
ns=127.0.0.1:$ns_port
wait_log() { # FILE PATTERN SECONDS
    for _ in $(seq 1 $(($3 * 10))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "timed out waiting for '$2' in $1" >&2
    tail -20 "$1" >&2
    return 1
}

# The first user the operator starts the broker with (initAuthenticationUser in RocketMQ's
# example form, always a super user); the dashboard, the clients and mqadmin sign as it.
# The provider keys are Apache's defaults, written out as its ACL 2.0 guide does (corvus
# names them as keys it has no use for).
admin=dashadmin
admin_secret=dash-admin-secret-1
export CORVUS_ACCESS_KEY=$admin CORVUS_SECRET_KEY=$admin_secret
auth=org.apache.rocketmq.auth
printf '%s\n' authenticationEnabled=true authorizationEnabled=true \
    "authenticationProvider=$auth.authentication.provider.DefaultAuthenticationProvider" \
    "authenticationMetadataProvider=$auth.authentication.provider.LocalAuthenticationMetadataProvider" \
    "authorizationProvider=$auth.authorization.provider.DefaultAuthorizationProvider" \
    "authorizationMetadataProvider=$auth.authorization.provider.LocalAuthorizationMetadataProvider" \
    "initAuthenticationUser={\"username\":\"$admin\",\"password\":\"$admin_secret\"}" \
    >"$work/broker.conf"

if [ "$against" = apache ]; then
    RMQ_CP=${CARGO_TARGET_DIR:-$root/target}/rocketmq-diff/rocketmq-cp.txt
    # fetch_rocketmq, start_rocketmq (which adds to PIDS).
    source "$root/tests/rocketmq-diff/apache-lib.sh"
    fetch_rocketmq
    printf '%s\n' traceTopicEnable=true | cat "$RMQ_LIB_DIR/broker.conf" - "$work/broker.conf" \
        >"$work/apache.conf"
    BROKER_CONFS=("$work/apache.conf")
    start_rocketmq "$work/apache" "$ns_port" "$broker_port"
    mkdir -p "$work/tools/conf"
    printf 'accessKey: %s\nsecretKey: %s\n' "$admin" "$admin_secret" >"$work/tools/conf/tools.yml"
    cp "$root/tests/rocketmq-tools/conf/logback_tools.xml" "$work/tools/conf/"
    rmq_admin() {
        (cd "$work" && ROCKETMQ_HOME="$work/tools" java -XX:TieredStopAtLevel=1 \
            -XX:+UseSerialGC -cp "$(cat "$RMQ_CP")" \
            org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$ns")
    }
    # The broker registers a moment after it says it booted.
    for _ in $(seq 1 30); do
        rmq_admin updateTopic -c DefaultCluster -t DashTopic -r 8 -w 8 >"$work/topic.log" 2>&1 &&
            grep -q success "$work/topic.log" && break
        sleep 1
    done
    grep -q success "$work/topic.log" || { cat "$work/topic.log" >&2; exit 1; }
    tick() { rmq_admin sendMessage -t DashTopic -p "tick$1" -k "tick$1" -c TagC; }
    brokers=1
else
    "$bin/namesrv" --listen "$ns" >"$work/ns.log" 2>&1 & pids+=($!)
    # Fixed direct ports, as in a deployment (deploy/broker.toml): each core then stamps its
    # own address as its messages' store host, which the message page's track matches
    # against the cluster. Six free ports from p: core 0 at p+2 (VIP twin p), core 1 at p+5
    # (VIP twin p+3).
    direct_base=$(python3 -c '
import socket
for _ in range(200):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    try:
        held = []
        for i in range(1, 6):
            t = socket.socket(); t.bind(("127.0.0.1", p + i)); held.append(t)
        print(p + 2); break
    except OSError:
        pass
')
    printf 'direct_port_base=%s\n' "$direct_base" >>"$work/broker.conf"
    "$bin/broker" -c "$work/broker.conf" --listen "127.0.0.1:$broker_port" --cores 2 \
        --name broker-a --data-dir "$work/data" --namesrv "$ns" >"$work/broker.log" 2>&1 &
    pids+=($!)
    wait_log "$work/broker.log" "broker listening on" 30
    if env -u CORVUS_ACCESS_KEY -u CORVUS_SECRET_KEY "$bin/mqadmin" update-topic -n "$ns" \
        -t DashUnsigned -q 1 >/dev/null 2>&1; then
        echo "the broker created a topic for an unsigned mqadmin: ACL 2.0 is not on" >&2
        exit 1
    fi
    "$bin/mqadmin" update-topic -n "$ns" -t DashTopic -q 8 >/dev/null
    tick() { "$bin/mqadmin" send -n "$ns" -t DashTopic -p "tick$1" -k "tick$1" -c TagC; }
    brokers=2
fi

# The clients: 100 traced messages with keys and tags, a push consumer of DashGroup, and
# DashOffline, which read the first 40 and left.
mkfifo "$work/clients.in"
java -cp "$java_dir/target/classes:$(cat "$java_dir/cp.txt")" corvus.DashboardClients \
    "$ns" DashTopic 100 DashProducer DashGroup DashOffline "$admin" "$admin_secret" \
    <"$work/clients.in" >"$work/clients.log" 2>&1 &
pids+=($!)
exec 3>"$work/clients.in"
wait_log "$work/clients.log" "^READY" 120
grep "^CONSUMED" "$work/clients.log"

# One message a second for the charts.
(
    for i in $(seq 1 600); do
        tick "$i" >/dev/null 2>&1 || true
        sleep 1
    done
) & pids+=($!)

java -jar "$jar" --server.port="$http_port" --rocketmq.config.namesrvAddrs="$ns" \
    --rocketmq.config.namesrvAddr="$ns" --rocketmq.config.dataPath="$work/dash-data" \
    --rocketmq.config.accessKey="$admin" --rocketmq.config.secretKey="$admin_secret" \
    >"$work/dashboard.log" 2>&1 & pids+=($!)
wait_log "$work/dashboard.log" "Started App" 120
# Both collections (second 0 for brokers, 30 for topics) after a minute of traffic, and a
# save (every 5 s) after them.
python3 -c 'import time; time.sleep((60 - time.localtime().tm_sec) + 30 + 7)'

DASHBOARD_BROKERS=$brokers python3 "$root/tests/rocketmq-dashboard-pages.py" \
    "http://127.0.0.1:$http_port" "$work/clients.log" "$admin"
