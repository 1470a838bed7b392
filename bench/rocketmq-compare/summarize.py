#!/usr/bin/env python3
"""Turns run.sh's results.jsonl into Markdown: one row per run, then the means and ratios."""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    print("no results")
    sys.exit(0)

print("| run | broker | send msg/s | RT p50 / p99 / p99.9 / max ms | consume msg/s | e2e p50 / p99 ms "
      "| broker CPU util | broker CPU-s per M msgs | failed | load before/after |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['run']} | {r['broker']} | {r['send_tps']:,.0f} | "
          f"{r['rt_p50_us']/1000:.2f} / {r['rt_p99_us']/1000:.2f} / {r['rt_p999_us']/1000:.2f} / {r['rt_max_us']/1000:.1f} | "
          f"{r['consume_tps']:,.0f} | {r['e2e_p50_ms']} / {r['e2e_p99_ms']} | {r['broker_cpu_util']*100:.0f}% | "
          f"{r['broker_cpu_s_per_M_sent']:.1f} | {r['failed']} | {r['load_before']:.2f}/{r['load_after']:.2f} |")

def mean(kind, key):
    v = [r[key] for r in rows if r["broker"] == kind]
    return statistics.mean(v) if v else float("nan")

print()
print("| mean | send msg/s | RT p50 ms | RT p99 ms | consume msg/s | broker CPU util | msg/s per broker CPU-second "
      "| broker CPU-s per M msgs |")
print("|---|---|---|---|---|---|---|---|")
m = {}
for kind in ("rocketmq", "corvus"):
    tps = mean(kind, "send_tps")
    util = mean(kind, "broker_cpu_util")
    cpu_m = mean(kind, "broker_cpu_s_per_M_sent")
    m[kind] = dict(tps=tps, util=util, cpu_m=cpu_m, p99=mean(kind, "rt_p99_us") / 1000,
                   per_core=(1e6 / cpu_m) if cpu_m else float("nan"))
    print(f"| {kind} | {tps:,.0f} | {mean(kind, 'rt_p50_us')/1000:.2f} | {m[kind]['p99']:.2f} | "
          f"{mean(kind, 'consume_tps'):,.0f} | {util*100:.0f}% | {m[kind]['per_core']:,.0f} | {cpu_m:.1f} |")
if "rocketmq" in m and "corvus" in m:
    r, c = m["rocketmq"], m["corvus"]
    print()
    print(f"corvus / RocketMQ: send throughput {c['tps']/r['tps']:.2f}x; messages per broker CPU-second "
          f"{c['per_core']/r['per_core']:.2f}x; broker CPU per message {c['cpu_m']/r['cpu_m']:.3f} "
          f"(1/{r['cpu_m']/c['cpu_m']:.1f}); RT p99 {c['p99']:.2f} vs {r['p99']:.2f} ms")
