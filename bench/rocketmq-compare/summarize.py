#!/usr/bin/env python3
"""Turns run.sh's results.jsonl into Markdown: one row per run, then the means and ratios,
per load driver (java: driver/; rust-single and rust-batch: corvus's `bench remoting`)."""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    print("no results")
    sys.exit(0)
for r in rows:
    # Rows of results.jsonl files from before `bench remoting` have no driver.
    r.setdefault("driver", "java")

# RocketMQ's own benchmark tools (--driver tools) report their RT as an average and a max,
# not percentiles: their rows have a table of their own.
TOOLS = {"tool-producer": "Producer", "tool-batch": "BatchProducer",
         "tool-tx": "TransactionProducer", "tool-consumer": "Producer + Consumer"}
tool_rows = [r for r in rows if r["driver"] in TOOLS]
rows = [r for r in rows if r["driver"] not in TOOLS]

def num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"

if tool_rows:
    print("| run | RocketMQ tool | flush | broker | send msg/s | tool's TPS | RT avg / max ms "
          "| consume TPS | broker CPU util | broker CPU-s per M msgs | failed | load before/after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in tool_rows:
        tool = TOOLS[r["driver"]] + (f" (batch {r['batch']})" if "batch" in r else "")
        print(f"| {r['run']} | {tool}, {r['threads']} threads, {r['size']} B | {r['flush']} | {r['broker']} | "
              f"{r['send_tps']:,.0f} | {num(r.get('tool_send_tps'), ',.0f')} | "
              f"{num(r.get('rt_avg_ms'), '.2f')} / {num(r.get('rt_max_ms'), '.0f')} | "
              f"{num(r.get('consume_tps'), ',.0f')} | {r['broker_cpu_util']*100:.0f}% | "
              f"{r['broker_cpu_s_per_M_sent']:.1f} | {r['failed']} | "
              f"{r['load_before']:.2f}/{r['load_after']:.2f} |")
    print()
    for d in TOOLS:
        for flush in ("async", "sync"):
            m = {}
            for kind in ("rocketmq", "corvus"):
                v = [r for r in tool_rows if r["driver"] == d and r["broker"] == kind and r["flush"] == flush]
                if v:
                    m[kind] = {k: statistics.mean(x[k] for x in v if x.get(k) is not None)
                               for k in ("send_tps", "broker_cpu_s_per_M_sent", "rt_avg_ms")
                               if any(x.get(k) is not None for x in v)}
            if "rocketmq" in m and "corvus" in m:
                r, c = m["rocketmq"], m["corvus"]
                rt = (f"; RT avg {c['rt_avg_ms']:.2f} vs {r['rt_avg_ms']:.2f} ms"
                      if "rt_avg_ms" in c and "rt_avg_ms" in r else "")
                print(f"- {TOOLS[d]}, {flush} flush: corvus / RocketMQ: send throughput "
                      f"{c['send_tps']/r['send_tps']:.2f}x; broker CPU per message "
                      f"{c['broker_cpu_s_per_M_sent']:.1f} vs {r['broker_cpu_s_per_M_sent']:.1f} CPU-s per M "
                      f"(1/{r['broker_cpu_s_per_M_sent']/c['broker_cpu_s_per_M_sent']:.1f}){rt}")
    print()
if not rows:
    sys.exit(0)

def label(r):
    if r["driver"] == "java":
        return f"java, {r['threads']} sync threads"
    if r["driver"] == "v5":
        return f"java v5 gRPC SDK, {r['threads']} sync threads (RocketMQ: broker + Proxy)"
    if r["driver"] == "rust-single":
        return f"rust, {r['threads']} conns x {r.get('inflight', 1)} in flight, single"
    pulls = f", pulls of {r['pull_batch']}" if r.get('pull_batch', 32) != 32 else ""
    return f"rust, {r['threads']} conns x {r.get('inflight', 1)} in flight, batch {r.get('batch', 1)}{pulls}"

print("| run | driver | broker | send msg/s | RT p50 / p99 / p99.9 / max ms | consume msg/s | e2e p50 / p99 ms "
      "| broker CPU util | broker CPU-s per M msgs | driver CPU util | failed | backlog at end | load before/after |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    drv = f"{r['driver_cpu_util']*100:.0f}%" if "driver_cpu_util" in r else "-"
    print(f"| {r['run']} | {label(r)} | {r['broker']} | {r['send_tps']:,.0f} | "
          f"{r['rt_p50_us']/1000:.2f} / {r['rt_p99_us']/1000:.2f} / {r['rt_p999_us']/1000:.2f} / {r['rt_max_us']/1000:.1f} | "
          f"{r['consume_tps']:,.0f} | {r['e2e_p50_ms']} / {r['e2e_p99_ms']} | {r['broker_cpu_util']*100:.0f}% | "
          f"{r['broker_cpu_s_per_M_sent']:.1f} | {drv} | {r['failed']} | {r.get('backlog_at_end', 0):,} | "
          f"{r['load_before']:.2f}/{r['load_after']:.2f} |")

drivers = []
for r in rows:
    if r["driver"] not in drivers:
        drivers.append(r["driver"])

def mean(driver, kind, key):
    v = [r[key] for r in rows if r["broker"] == kind and r["driver"] == driver and key in r]
    return statistics.mean(v) if v else float("nan")

print()
print("| driver | broker (mean) | send msg/s | RT p50 ms | RT p99 ms | consume msg/s | broker CPU util "
      "| msg/s per broker CPU-second | broker CPU-s per M msgs |")
print("|---|---|---|---|---|---|---|---|---|")
ratios = []
for d in drivers:
    m = {}
    name = label(next(r for r in rows if r["driver"] == d))
    for kind in ("rocketmq", "corvus"):
        if not any(r["broker"] == kind and r["driver"] == d for r in rows):
            continue
        tps = mean(d, kind, "send_tps")
        util = mean(d, kind, "broker_cpu_util")
        cpu_m = mean(d, kind, "broker_cpu_s_per_M_sent")
        m[kind] = dict(tps=tps, util=util, cpu_m=cpu_m, p99=mean(d, kind, "rt_p99_us") / 1000,
                       per_core=(1e6 / cpu_m) if cpu_m else float("nan"))
        print(f"| {name} | {kind} | {tps:,.0f} | {mean(d, kind, 'rt_p50_us')/1000:.2f} | {m[kind]['p99']:.2f} | "
              f"{mean(d, kind, 'consume_tps'):,.0f} | {util*100:.0f}% | {m[kind]['per_core']:,.0f} | {cpu_m:.1f} |")
    if "rocketmq" in m and "corvus" in m:
        r, c = m["rocketmq"], m["corvus"]
        ratios.append(
            f"{name}: corvus / RocketMQ: send throughput {c['tps']/r['tps']:.2f}x; messages per broker "
            f"CPU-second {c['per_core']/r['per_core']:.2f}x; broker CPU per message {c['cpu_m']/r['cpu_m']:.3f} "
            f"(1/{r['cpu_m']/c['cpu_m']:.1f}); RT p99 {c['p99']:.2f} vs {r['p99']:.2f} ms")
if ratios:
    print()
    for line in ratios:
        print(f"- {line}")
