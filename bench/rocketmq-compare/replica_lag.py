#!/usr/bin/env python3
"""The slave's lag during a replica.sh run.

  replica_lag.py sample-corvus MQADMIN NAMESRV BROKER_ADDR INTERVAL_MS BEGIN_EPOCH_MS MEASURE_S
      Samples corvus's master (`mqadmin --json ha-status`, summed over shards: the master's
      end and what its most advanced slave acknowledged) from BEGIN_EPOCH_MS (wall clock, the
      driver's measured window) for MEASURE_S seconds and prints the lines HaLag.java
      prints for RocketMQ: "S ms master_end slave_acked", then "DONE samples errors".
  replica_lag.py report FILE
      One JSON object: samples, bytes behind p50/p99/max and the lag in milliseconds
      p50/p99/max: for each sample, how long ago the master's end (linear between samples)
      first reached where the slave's acknowledgement is now (bench/src/replica.rs's
      definition).
"""
import bisect
import json
import subprocess
import sys
import time


def sample_corvus(mqadmin, ns, addr, interval_ms, begin_epoch_ms, measure_s):
    begin = time.monotonic() + (begin_epoch_ms / 1000 - time.time())
    end = begin + measure_s
    cmd = [mqadmin, "-n", ns, "--json", "ha-status", "-b", addr]
    samples = errors = 0
    lines = []
    while time.monotonic() < end:
        now = time.monotonic()
        if now < begin:
            time.sleep(min(interval_ms / 1000, begin - now))
            continue
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=5, check=True).stdout
            at = time.monotonic()
            v = json.loads(out)
            m_end = acked = 0
            seen = False
            for shard in v.get("shards", []):
                best = None
                for s in shard.get("slaves") or []:
                    if best is None or s["acked"] > best["acked"]:
                        best = s
                if best is not None:
                    m_end += best["acked"] + best["lag_bytes"]
                    acked += best["acked"]
                    seen = True
            if seen:
                lines.append("S %.3f %d %d" % ((at - begin) * 1000, m_end, acked))
                samples += 1
            else:
                errors += 1
        except Exception:
            errors += 1
        time.sleep(interval_ms / 1000)
    print("\n".join(lines))
    print("DONE %d %d" % (samples, errors))


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def report(path):
    t, ends, acks = [], [], []
    done = None
    for line in open(path):
        f = line.split()
        if f and f[0] == "S":
            t.append(float(f[1]))
            ends.append(int(f[2]))
            acks.append(int(f[3]))
        elif f and f[0] == "DONE":
            done = (int(f[1]), int(f[2]))
    if not t:
        return {"samples": 0, "errors": done[1] if done else None}
    behind = [max(0, e - a) for e, a in zip(ends, acks)]
    ms = []
    for i, a in enumerate(acks):
        # When the master's end first reached a (ends are non-decreasing).
        j = bisect.bisect_left(ends, a)
        if a >= ends[i]:
            reached = t[i]  # the slave has all the master has
        elif j == 0 or ends[j] == a:
            reached = t[j]
        else:
            frac = (a - ends[j - 1]) / (ends[j] - ends[j - 1])
            reached = t[j - 1] + (t[j] - t[j - 1]) * frac
        ms.append(max(0.0, t[i] - reached))
    span = (t[-1] - t[0]) / 1000 or 1
    return {
        "samples": len(t),
        "errors": done[1] if done else None,
        "sample_interval_ms": (t[-1] - t[0]) / max(1, len(t) - 1),
        "master_bytes_per_s": (ends[-1] - ends[0]) / span,
        "lag_bytes_p50": pct(behind, 50), "lag_bytes_p99": pct(behind, 99),
        "lag_bytes_max": max(behind),
        "lag_ms_p50": pct(ms, 50), "lag_ms_p99": pct(ms, 99), "lag_ms_max": max(ms),
    }


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "sample-corvus":
        a = sys.argv[2:]
        sample_corvus(a[0], a[1], a[2], float(a[3]), float(a[4]), float(a[5]))
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        print(json.dumps(report(sys.argv[2])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
