# Sourced by neighbours.sh and tenants.sh: the binaries, a one-core broker on CPU 0 beside
# its NameServer, and a one-line summary of a `bench produce --json` run.
# Needs `cargo build --release -p broker -p namesrv -p bench` and `cargo build -p mqadmin`.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${CARGO_TARGET_DIR:-$ROOT/target}/release
MQADMIN=${MQADMIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/mqadmin}
RATE=${RATE:-2000}
DURATION=${DURATION:-15}
NS=127.0.0.1:29876
BROKER_ADDR=127.0.0.1:29911

# start_broker OUT_DIR [broker args...]: NameServer and broker, stopped and their stores
# removed when the script exits.
start_broker() {
  local out=$1; shift
  taskset -c 0 "$B/namesrv" --listen $NS > "$out/ns.log" 2>&1 &
  NSPID=$!
  taskset -c 0 "$B/broker" --cores 1 --listen $BROKER_ADDR -n $NS --data-dir "$out/data" \
    --tail-ring-dir "/dev/shm/paced-$$" "$@" > "$out/broker.log" 2>&1 &
  BR=$!
  trap "kill $BR $NSPID 2>/dev/null; wait; rm -rf '$out/data' /dev/shm/paced-$$" EXIT
  for _ in $(seq 1 100); do grep -q "listening" "$out/broker.log" && break; sleep 0.2; done
}

# wait_route TOPIC: until the NameServer routes it.
wait_route() {
  for _ in $(seq 1 50); do "$MQADMIN" topic-route -n $NS -t "$1" > /dev/null 2>&1 && break; sleep 0.2; done
}

# summary LABEL JSON_FILE: rate, send->ack percentiles, errors and their kinds.
summary() {
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[2]) if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {}
l = r.get("latency_us", {})
kinds = "; ".join(sorted(set(d[:90] for d in r.get("error_detail", []))))[:300]
print(f"{sys.argv[1]:12} msgs/s {r.get('msgs_per_sec', 0):>8.0f}  send->ack p50 {l.get('p50', 0) / 1e3:.3f}"
      f"  p99 {l.get('p99', 0) / 1e3:.3f}  max {l.get('max', 0) / 1e3:.1f} ms  errors {r.get('errors', 'none reported')}"
      f"  {kinds}")
PY
}
