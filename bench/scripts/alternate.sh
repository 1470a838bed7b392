#!/usr/bin/env bash
# Alternates two builds of the bench in one run, so that the VM's drift hits both alike:
# the quickstart, `bench produce` and `bench e2e` of OLD, then of NEW, ROUNDS times.
#
#   bench/scripts/alternate.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS] [OUT_DIR]
#
# Each BIN_DIR holds a release `bench`, `broker` and `namesrv` (e.g. a worktree of each
# commit built with `CARGO_TARGET_DIR=/tmp/old cargo build --release -p broker -p namesrv
# -p bench`, then /tmp/old/release). Every run's full output lands in OUT_DIR; the summary
# lines are printed at the end.
set -euo pipefail
old=${1:?OLD_BIN_DIR}
new=${2:?NEW_BIN_DIR}
rounds=${3:-3}
out=${4:-$(mktemp -d /tmp/corvus-alternate-XXXXXX)}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
    for side in old new; do
        dir=$([ "$side" = old ] && echo "$old" || echo "$new")
        echo "round $round $side $(date +%T)"
        "$dir/bench" --latency-duration 5 >"$out/quickstart-$side-$round.txt" 2>&1
        "$dir/bench" produce --duration 6 >"$out/produce-$side-$round.txt" 2>&1
        "$dir/bench" e2e --duration 8 >"$out/e2e-$side-$round.txt" 2>&1
    done
done
for f in "$out"/*.txt; do
    echo "== $(basename "$f" .txt)"
    grep -E '^(produce|consume|latency|e2e-produce|e2e-consume) |broker CPU' "$f" || true
done
echo "outputs: $out"
