#!/usr/bin/env python3
"""Compares two transcripts of the scenario program (Apache RocketMQ's and corvus's) and
explains what differs with known-differences.txt.

    diff.py --client 4|5 [--known FILE] [--scenarios a,b,...] ROCKETMQ.txt CORVUS.txt

Per scenario (the first word of each line), the lines only in Apache RocketMQ's transcript
are "-" lines, those only in corvus's "+" lines (as multisets: a line twice on one side and
once on the other is one difference). Each difference is looked up in the known-differences
file; the report lists the unlisted ones first, then the listed ones by section (deliberate,
pending, open) with their reasons. Exit status 1 when anything is not listed, else 0. With --scenarios only those
scenarios are compared (the CI test's short set).
"""
import argparse
import collections
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECTIONS = {
    "deliberate": "deliberate (corvus differs on purpose)",
    "pending": "pending (a fix under way removes it)",
    "open": "open (not explained, no fix under way yet)",
}


def load_known(path):
    """Entries (section, sign, clients, regex, reason) from the known-differences file.

    Each entry is one line: `SIGN CLIENTS REGEX || REASON`, SIGN `-` (a line only Apache
    RocketMQ prints) or `+` (only corvus), CLIENTS `4`, `5` or `4,5`, REGEX matched against
    the whole transcript line. `[deliberate]`, `[pending]` and `[open]` start the sections.
    """
    entries = []
    section = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
            if section not in SECTIONS:
                sys.exit(f"{path}:{n}: unknown section [{section}] (known: {', '.join(SECTIONS)})")
            continue
        m = re.fullmatch(r"([-+])\s+([45](?:,[45])?)\s+(.+?)\s+\|\|\s+(.+)", line)
        if not m or section is None:
            sys.exit(f"{path}:{n}: not an entry (SIGN CLIENTS REGEX || REASON under a [section]): {raw}")
        sign, clients, regex, reason = m.groups()
        entries.append((section, sign, set(clients.split(",")), re.compile(regex), reason, n))
    return entries


def by_scenario(path, only):
    lines = collections.defaultdict(collections.Counter)
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        scenario = line.split(" ", 1)[0]
        if only is None or scenario in only:
            lines[scenario][line] += 1
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True, choices=["4", "5"])
    ap.add_argument("--known", default=str(HERE / "known-differences.txt"))
    ap.add_argument("--scenarios")
    ap.add_argument("rocketmq")
    ap.add_argument("corvus")
    a = ap.parse_args()
    only = set(a.scenarios.split(",")) if a.scenarios else None
    known = load_known(Path(a.known))
    left = by_scenario(a.rocketmq, only)
    right = by_scenario(a.corvus, only)
    unexplained, explained = [], []
    for scenario in sorted(set(left) | set(right)):
        diffs = [("-", l) for l in (left[scenario] - right[scenario]).elements()]
        diffs += [("+", l) for l in (right[scenario] - left[scenario]).elements()]
        for sign, line in diffs:
            hit = next((e for e in known if e[1] == sign and a.client in e[2] and e[3].fullmatch(line)), None)
            if hit:
                explained.append((sign, line, hit))
            else:
                unexplained.append((sign, line))
    missing = [s for s in sorted(left) if s not in right] + [s for s in sorted(right) if s not in left]
    counts = collections.Counter(e[0] for _, _, e in explained)
    print(f"{len(unexplained)} not listed, " + ", ".join(f"{counts[k]} {k}" for k in SECTIONS)
          + f" difference(s); {len(set(left) | set(right))} scenario(s) compared")
    for s in missing:
        print(f"  scenario {s} is in one transcript only")
    if unexplained:
        print("not listed in known-differences.txt:")
        for sign, line in unexplained:
            print(f"  {sign} {line}")
    for section, title in SECTIONS.items():
        rows = [(sign, line, e) for sign, line, e in explained if e[0] == section]
        if rows:
            print(f"{title}:")
            for sign, line, e in rows:
                print(f"  {sign} {line}\n      {e[4]}")
    return 1 if unexplained or missing else 0


if __name__ == "__main__":
    sys.exit(main())
