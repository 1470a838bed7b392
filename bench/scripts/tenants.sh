#!/usr/bin/env bash
# Two tenants on one broker, one flooding far beyond its quota: one broker core on CPU 0 with
# ACL on and `quotas = account:tenant-noisy:send_messages_per_sec=$NOISY_QUOTA`; the calm
# tenant's paced producer (`bench produce`, single 1 KiB sends at RATE/s) on CPU 1, alone and
# then beside the noisy tenant's unpaced producers (8 x 256 in flight, 64 B, under SCHED_IDLE
# on CPU 1, so only the CPU the calm client leaves). Prints each run's rate, p50/p99/max
# send->ack and errors, and the flooder's.
# EXTRA_CONFIG: more lines for the broker's config file (e.g. connection_light_requests_max = 0).
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
. "$(dirname "$0")/paced_lib.sh"
NOISY_QUOTA=${NOISY_QUOTA:-1000}
out=${OUT:-/tmp/tenants}; rm -rf "$out"; mkdir -p "$out"

cat > "$out/plain_acl.yml" <<'YML'
accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: tenant-noisy
    secretKey: noisy-secret-1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: tenant-calm
    secretKey: calm-secret-1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
YML
cat > "$out/broker.toml" <<TOML
acl_enable = true
acl_file = "$out/plain_acl.yml"
acl_access_key = "corvus-broker"
acl_secret_key = "corvus-broker-secret"
quotas = "account:tenant-noisy:send_messages_per_sec=$NOISY_QUOTA"
${EXTRA_CONFIG:-}
TOML

start_broker "$out" -c "$out/broker.toml"
"$MQADMIN" --access-key admin0001 --secret-key admin-secret-1 update-topic -n $NS -t Tenants -q 4 \
  > "$out/topic.log" 2>&1
wait_route Tenants

calm() {
  taskset -c 1 "$B/bench" produce -n $NS -t Tenants --access-key tenant-calm --secret-key calm-secret-1 \
    --batch 1 --size 1024 --rate "$RATE" --inflight 64 --duration "$DURATION" --no-disk \
    --floor-duration 0 --json > "$out/$1.json" 2> "$out/$1.err"
  summary "calm $1" "$out/$1.json"
}

calm solo
taskset -c 1 chrt --idle 0 "$B/bench" produce -n $NS -t Tenants --access-key tenant-noisy \
  --secret-key noisy-secret-1 --batch 1 --size 64 --producers 8 --inflight 256 \
  --duration $((DURATION + 6)) --no-disk --json > "$out/noisy.json" 2> "$out/noisy.err" &
NOISY=$!
sleep 3
calm beside
wait $NOISY
summary "noisy" "$out/noisy.json"
calm solo2
