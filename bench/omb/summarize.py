"""Summarizes OMB's result files (one JSON a run, written by bench/omb/run.sh) as markdown:
a table a workload, a row a run, then the median over runs of each broker and corvus's
figures as a share of RocketMQ's.

    python3 summarize.py RESULTS_DIR
"""
import glob
import json
import os
import statistics
import sys

COLS = [
    # (header, function of the result, format)
    ("pub msg/s", lambda d: mean(d["publishRate"]), "{:,.0f}"),
    ("cons msg/s", lambda d: mean(d["consumeRate"]), "{:,.0f}"),
    ("pub errors/s", lambda d: mean(d["publishErrorRate"]), "{:.1f}"),
    ("backlog end", lambda d: d["backlog"][-1] if d["backlog"] else 0, "{:,}"),
    ("pub p50 ms", lambda d: d["aggregatedPublishLatency50pct"], "{:.2f}"),
    ("pub p99 ms", lambda d: d["aggregatedPublishLatency99pct"], "{:.2f}"),
    ("pub p99.9 ms", lambda d: d["aggregatedPublishLatency999pct"], "{:.2f}"),
    ("pub max ms", lambda d: d["aggregatedPublishLatencyMax"], "{:.1f}"),
    ("e2e p50 ms", lambda d: d["aggregatedEndToEndLatency50pct"], "{:.1f}"),
    ("e2e p99 ms", lambda d: d["aggregatedEndToEndLatency99pct"], "{:.1f}"),
    ("e2e p99.9 ms", lambda d: d["aggregatedEndToEndLatency999pct"], "{:.1f}"),
    ("e2e max ms", lambda d: d["aggregatedEndToEndLatencyMax"], "{:.1f}"),
]
TITLES = {
    "fixed": "1 topic, 16 partitions, 1 KiB, fixed rate",
    "max": "1 topic, 16 partitions, 1 KiB, max rate (OMB's rate controller)",
}


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def row(cells):
    return "| " + " | ".join(cells) + " |"


def main(out):
    results = []
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        d = json.load(open(path))
        if "corvus" in d:
            results.append(d)
    if not results:
        print("no results in " + out)
        return
    machine = os.path.join(out, "machine.txt")
    if os.path.exists(machine):
        print("```\n" + open(machine).read().rstrip() + "\n```\n")
    for wl in ("fixed", "max"):
        runs = [d for d in results if d["corvus"]["workload"] == wl]
        if not runs:
            continue
        rate = f" ({runs[0]['workload']})" if runs[0].get("workload") else ""
        print(f"### {TITLES[wl]}{rate}\n")
        print(row(["broker", "run", "load before/after"] + [c[0] for c in COLS]))
        print(row(["---"] * (3 + len(COLS))))
        for d in sorted(runs, key=lambda d: (d["corvus"]["run"], d["corvus"]["broker"])):
            c = d["corvus"]
            print(row([c["broker"], str(c["run"]), f"{c['load_before']:.1f}/{c['load_after']:.1f}"]
                      + [fmt.format(f(d)) for _, f, fmt in COLS]))
        medians = {}
        for broker in ("rocketmq", "corvus"):
            mine = [d for d in runs if d["corvus"]["broker"] == broker]
            if mine:
                medians[broker] = [statistics.median(f(d) for d in mine) for _, f, _ in COLS]
                print(row([f"**{broker}** median", str(len(mine)), ""]
                          + [fmt.format(v) for (_, _, fmt), v in zip(COLS, medians[broker])]))
        if len(medians) == 2:
            ratio = [f"{c / r:.2f}" if r else "-" for c, r in zip(medians["corvus"], medians["rocketmq"])]
            print(row(["corvus / rocketmq", "", ""] + ratio))
        print()
    print("Rates are OMB's 10 s windows averaged over the measured window; latencies are OMB's "
          "aggregated HdrHistograms over it (publish: send to acknowledgement; end to end: the "
          "message's born timestamp to its arrival at the consumer, whole milliseconds).")


if __name__ == "__main__":
    main(sys.argv[1])
