#!/usr/bin/env python3
"""Broker memory per client connection, and whether it comes back when they close.

usage: connection_memory.py BROKER_PID BROKER_PORT CONNECTIONS idle|half

Opens CONNECTIONS TCP connections to the broker (idle: nothing sent; half: each sends the
first 8 MiB of a frame announcing 16 MiB), reads the broker's VmRSS before, while they are
open, and 3 s after closing them. Run it several times against one broker to see whether a
later wave reuses what an earlier one freed. Loopback only; the process's descriptor limit
bounds CONNECTIONS.
"""
import socket
import struct
import sys
import time

pid = int(sys.argv[1]); port = int(sys.argv[2]); n = int(sys.argv[3]); mode = sys.argv[4]
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) // 1024
base = rss()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    socks.append(s)
if mode == "half":
    # a frame header announcing 16 MiB, then 8 MiB of it
    chunk = b"\0" * (1 << 20)
    for s in socks:
        s.sendall(struct.pack(">I", 16 << 20) + struct.pack(">I", 64))
        for _ in range(8):
            s.sendall(chunk)
time.sleep(2)
held = rss()
for s in socks: s.close()
time.sleep(3)
after = rss()
print(f"{mode}: {n} connections: RSS {base} MiB before, {held} MiB open ({(held-base)*1024/n:.1f} KiB each), {after} MiB 3 s after closing")
