#!/usr/bin/env python3
"""Tables of a replica.sh run (results.jsonl): one row a run, then per broker and load the
mean msg/s standalone and replicated and their ratio. Usage: replica_summary.py RESULTS"""
import json
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]


def f(v, fmt="%.2f"):
    return "-" if v is None else fmt % v


print("| round | broker | setup | load C x K x M | send msg/s | RT p50 / p99 ms | master CPU util "
      "| master CPU-s per M | slave CPU util (whole run) | slave lag p50 / p99 / max ms "
      "| lag p99 / max MB | lag samples | failed | backlog at end | load before / after |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    lag = r.get("lag") or {}
    run_s = r["window_s"] + 5
    slave = r["slave_cpu_s_total"] / run_s if r["setup"] == "async" else None
    lagms = "-" if not lag.get("samples") else "%s / %s / %s" % (
        f(lag["lag_ms_p50"]), f(lag["lag_ms_p99"]), f(lag["lag_ms_max"]))
    lagmb = "-" if not lag.get("samples") else "%s / %s" % (
        f(lag["lag_bytes_p99"] / 1e6), f(lag["lag_bytes_max"] / 1e6))
    print("| %d | %s | %s | %d x %d x %d | %s | %s / %s | %s | %s | %s | %s | %s | %s | %d | %d | %s / %s |" % (
        r["round"], r["broker"], r["setup"], r["conns"], r["inflight"], r["batch"],
        "{:,.0f}".format(r["send_tps"]),
        f(r["rt_p50_us"] / 1000), f(r["rt_p99_us"] / 1000),
        "%.0f%%" % (100 * r["broker_cpu_util"]), f(r["broker_cpu_s_per_M_sent"]),
        "-" if slave is None else "%.0f%%" % (100 * slave), lagms, lagmb,
        "-" if not lag.get("samples") else "%d (%s ms apart)" % (lag["samples"], f(lag["sample_interval_ms"], "%.1f")),
        r["failed"], r["backlog_at_end"], r["load_before"].split()[0], r["load_after"].split()[0]))

print()
print("| broker | load C x K x M | standalone msg/s (mean) | ASYNC_MASTER + SLAVE msg/s (mean) "
      "| replicated / standalone | slave lag p99 ms (runs) |")
print("|---|---|---|---|---|---|")
groups = defaultdict(lambda: defaultdict(list))
for r in rows:
    groups[(r["broker"], "%d x %d x %d" % (r["conns"], r["inflight"], r["batch"]))][r["setup"]].append(r)
for (broker, load), g in groups.items():
    mean = lambda xs: sum(x["send_tps"] for x in xs) / len(xs) if xs else None
    s, a = mean(g["standalone"]), mean(g["async"])
    lags = ", ".join(f((x.get("lag") or {}).get("lag_ms_p99")) for x in g["async"])
    print("| %s | %s | %s | %s | %s | %s |" % (
        broker, load, "-" if s is None else "{:,.0f}".format(s),
        "-" if a is None else "{:,.0f}".format(a),
        "-" if not (s and a) else "%.2f" % (a / s), lags or "-"))
