#!/usr/bin/env python3
"""Hold idle TCP connections to a broker, as a misbehaving peer does.

usage: hold_connections.py SOURCE_IP HOST:PORT CONNECTIONS SECONDS

Opens up to CONNECTIONS connections from SOURCE_IP (a loopback address such as 127.0.0.2,
so the broker sees a peer of its own), sends nothing, prints how many it holds, keeps them
open SECONDS, then closes them. A connection the broker closes or refuses is counted as
refused. Loopback only; the process's descriptor limit bounds CONNECTIONS.
"""
import socket
import sys
import time

src, target, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
host, port = target.rsplit(":", 1)
if not (src.startswith("127.") and host.startswith("127.")):
    sys.exit("loopback addresses only")
socks, refused = [], 0
for _ in range(n):
    try:
        s = socket.create_connection((host, int(port)), timeout=2, source_address=(src, 0))
        socks.append(s)
    except OSError:
        refused += 1
print(f"holding {len(socks)} connections from {src} ({refused} refused)", flush=True)
time.sleep(seconds)
for s in socks:
    s.close()
