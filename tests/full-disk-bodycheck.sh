#!/bin/bash
# A full-disk run that checks every body served (issue 33 item 3), as root: a loop-mounted
# ext4 of FS_MIB, a NameServer and a broker (`small` profile, 2 cores) with its data there,
# four producers sending bodies that carry their own length and hash (corvus-bodycheck, or
# with JAVA=1 RocketMQ 4.9.8's client: BodyCheckLoad, checked by BodyCheckConsume too), and
# another process filling the filesystem CYCLES times (from FILL_AT s, for FILL_FOR s, then
# FILL_GAP s free). INFLIGHT=N sends async with N in flight per producer. RESTART=1 stops and restarts the broker while the disk is full.
#
# Needs: cargo build --release -p broker -p namesrv -p integration --bins (BIN= another
# build's target/release for the broker and NameServer only), and for JAVA=1 the programs of tests/rocketmq-java built.
# Prints the checkers' last lines; exits 1 if a body served was bad or an acknowledged
# message was not served. Everything it makes goes when it ends.
#
# Example: FS_MIB=1024 QUEUES=1 BODY_MAX=1000 CYCLES=4 FILL_AT=3 tests/full-disk-bodycheck.sh
set -u
W=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$W/target/release}
CHECKER=$W/target/release/corvus-bodycheck
FS_MIB=${FS_MIB:-512}; DUR=${DUR:-60}; FILL_AT=${FILL_AT:-20}; FILL_FOR=${FILL_FOR:-10}
FILL_GAP=${FILL_GAP:-5}; CYCLES=${CYCLES:-1}; QUEUES=${QUEUES:-8}; BODY_MAX=${BODY_MAX:-16384}
LAG_MS=${LAG_MS:-0}; PORT=${PORT:-27311}; NSPORT=$((PORT + 1))
R=$(mktemp -d /tmp/full-disk-bodycheck.XXXXXX)
RING=$(mktemp -d /dev/shm/full-disk-bodycheck.XXXXXX)
cleanup() {
    [ -f "$R/broker.pid" ] && kill "$(cat "$R/broker.pid")" 2>/dev/null
    [ -n "${NS:-}" ] && kill "$NS" 2>/dev/null
    sleep 1
    umount "$R/mnt" 2>/dev/null
    rm -rf "$RING"
    if [ -n "${KEEP:-}" ]; then echo "kept $R (logs; the image is deleted)"; rm -f "$R/fs.img"; else rm -rf "$R"; fi
}
trap cleanup EXIT
mkdir -p "$R/mnt"
truncate -s "${FS_MIB}M" "$R/fs.img" && mkfs.ext4 -q -F -m 0 "$R/fs.img" &&
    mount -o loop "$R/fs.img" "$R/mnt" || exit 2
mkdir -p "$R/mnt/data"
"$BIN/namesrv" --listen "127.0.0.1:$NSPORT" > "$R/namesrv.log" 2>&1 &
NS=$!
echo "${EXTRA_TOML:-}" > "$R/broker.toml"
start_broker() {
    "$BIN/broker" --profile small --cores 2 --listen "127.0.0.1:$PORT" \
        --namesrv "127.0.0.1:$NSPORT" --data-dir "$R/mnt/data" --tail-ring-dir "$RING" \
        --name fulldisk -c "$R/broker.toml" >> "$R/broker.log" 2>&1 &
    echo $! > "$R/broker.pid"
}
start_broker
for _ in $(seq 1 100); do grep -q "broker listening" "$R/broker.log" && break; sleep 0.2; done
free_bytes() { df -B1 --output=avail "$R/mnt" | tail -1; }
fill() {
    sleep "$FILL_AT"
    for _ in $(seq 1 "$CYCLES"); do
        free=$(free_bytes)
        fallocate -l $((free > 2097152 ? free - 1048576 : 4096)) "$R/mnt/filler-big" 2>/dev/null
        dd if=/dev/zero bs=64k of="$R/mnt/filler-rest" > /dev/null 2>&1
        echo "$(date +%T) filled: free $free -> $(free_bytes)"
        if [ "${RESTART:-0}" = 1 ]; then
            sleep 2
            kill -TERM "$(cat "$R/broker.pid")"
            while kill -0 "$(cat "$R/broker.pid")" 2> /dev/null; do sleep 0.1; done
            echo "$(date +%T) broker stopped on the full disk; starting it again"
            start_broker
        fi
        sleep "$FILL_FOR"
        rm -f "$R/mnt/filler-big" "$R/mnt/filler-rest"
        echo "$(date +%T) unfilled: free $(free_bytes)"
        sleep "$FILL_GAP"
    done
}
fill &
FILLER=$!
CHECK=(--namesrv "127.0.0.1:$NSPORT" --topic FullDisk --create-on "127.0.0.1:$PORT"
    --queues "$QUEUES" --lag-ms "$LAG_MS" --body-bytes-max "$BODY_MAX" --inflight "${INFLIGHT:-0}")
status=0
if [ "${JAVA:-0}" = 1 ]; then
    CP=$W/tests/rocketmq-java/target/classes:$(cat "$W/tests/rocketmq-java/cp.txt")
    "$CHECKER" "${CHECK[@]}" --producers 0 --duration-ms $(((DUR + 5) * 1000)) \
        > "$R/check.out" 2> "$R/check.err" &
    CHK=$!
    sleep 3
    java -cp "$CP" corvus.BodyCheckConsume "127.0.0.1:$NSPORT" FullDisk $(((DUR + 5) * 1000)) \
        > "$R/jcheck.out" 2>&1 &
    JCHK=$!
    java -cp "$CP" corvus.BodyCheckLoad "127.0.0.1:$NSPORT" FullDisk 4 $((DUR * 1000)) "$BODY_MAX" \
        > "$R/java.out" 2>&1
    wait "$CHK" || status=1
    wait "$JCHK" || status=1
    tail -1 "$R/java.out"
    grep "BAD BODY" "$R/jcheck.out" | head -20
    tail -1 "$R/jcheck.out"
else
    "$CHECKER" "${CHECK[@]}" --producers 4 --duration-ms $((DUR * 1000)) \
        > "$R/check.out" 2> "$R/check.err" || status=1
fi
wait "$FILLER"
grep "BAD BODY\|MISSING" "$R/check.out" | head -20
tail -1 "$R/check.out"
echo "broker: $(grep -c "writes resume" "$R/broker.log") resumes after a refused segment"
exit $status
