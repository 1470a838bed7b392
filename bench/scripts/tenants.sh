#!/usr/bin/env bash
# Two tenants on one broker, one flooding far beyond its quota: one broker core on CPU 0 with
# ACL on and `quotas = account:tenant-noisy:send_messages_per_sec=$NOISY_QUOTA`; the calm
# tenant's paced producer (`bench produce`, single 1 KiB sends at RATE/s) on CPU 1, alone and
# then beside the noisy tenant's unpaced producers (8 x 256 in flight, 64 B, under SCHED_IDLE
# on CPU 1, so only the CPU the calm client leaves). Prints each run's rate, p50/p99/max
# send->ack and errors, and the flooder's.
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${CARGO_TARGET_DIR:-$ROOT/target}/release
MQADMIN=${MQADMIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/mqadmin}
RATE=${RATE:-2000}
DURATION=${DURATION:-15}
NOISY_QUOTA=${NOISY_QUOTA:-1000}
NS=127.0.0.1:29876
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
TOML

taskset -c 0 "$B/namesrv" --listen $NS > "$out/ns.log" 2>&1 &
NSPID=$!
taskset -c 0 "$B/broker" --cores 1 --listen 127.0.0.1:29911 -n $NS --data-dir "$out/data" \
  --tail-ring-dir /dev/shm/tenants -c "$out/broker.toml" > "$out/broker.log" 2>&1 &
BR=$!
trap 'kill $BR $NSPID 2>/dev/null; wait; rm -rf "$out/data" /dev/shm/tenants' EXIT
for _ in $(seq 1 100); do grep -q "listening" "$out/broker.log" && break; sleep 0.2; done
"$MQADMIN" --access-key admin0001 --secret-key admin-secret-1 update-topic -n $NS -t Tenants -q 4 \
  > "$out/topic.log" 2>&1
for _ in $(seq 1 50); do "$MQADMIN" topic-route -n $NS -t Tenants > /dev/null 2>&1 && break; sleep 0.2; done

summary() {
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[2]) if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {}
l = r.get("latency_us", {})
print(f"{sys.argv[1]:12} msgs/s {r.get('msgs_per_sec', 0):>8.0f}  send->ack p50 {l.get('p50', 0) / 1e3:.3f}"
      f"  p99 {l.get('p99', 0) / 1e3:.3f}  max {l.get('max', 0) / 1e3:.1f} ms  errors {r.get('errors', 'none reported')}"
      f"  {'; '.join(sorted(set(d[:90] for d in r.get('error_detail', []))))[:300]}")
PY
}

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
