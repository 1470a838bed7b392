"""Drops from benchmark-framework/pom.xml every driver dependency but driver-api and
driver-rocketmq: the framework loads drivers by class name from the driver config, so the
others are only on its classpath, and some of them (driver-bookkeeper's shaded BookKeeper
parent, ...) do not resolve from Maven Central."""
import re
import sys

KEEP = {"driver-api", "driver-rocketmq"}
path = sys.argv[1]
text = open(path, encoding="utf-8").read()


def keep(m):
    artifact = re.search(r"<artifactId>([^<]+)</artifactId>", m.group(0))
    name = artifact.group(1) if artifact else ""
    return m.group(0) if not name.startswith("driver-") or name in KEEP else ""


trimmed = re.sub(r"[ \t]*<dependency>.*?</dependency>\s*?\n", keep, text, flags=re.S)
if "<artifactId>driver-rocketmq</artifactId>" not in trimmed:
    sys.exit(f"{path}: no driver-rocketmq dependency to keep")
open(path, "w", encoding="utf-8").write(trimmed)
