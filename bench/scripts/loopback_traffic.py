#!/usr/bin/env python3
"""Loopback TCP traffic that touches no broker: the control for a neighbour's own kernel work.

usage: loopback_traffic.py PAIRS WRITE_BYTES SECONDS

Opens PAIRS connected socket pairs on 127.0.0.1, and for SECONDS each side of each pair writes
WRITE_BYTES at a time as fast as the kernel takes them while reading what the other side
writes. Its cost is almost all the kernel's (copies, TCP, loopback delivery), run in the
context of this process on whatever CPU it is pinned to. Prints the bytes moved.
"""
import socket
import sys
import threading
import time

pairs, write, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(pairs)
stop = time.monotonic() + seconds
moved = [0]
chunk = b"x" * write


def pump(s):
    try:
        while time.monotonic() < stop:
            s.sendall(chunk)
    except OSError:
        pass


def drain(s):
    try:
        while time.monotonic() < stop:
            got = s.recv(1 << 16)
            if not got:
                return
            moved[0] += len(got)
    except OSError:
        pass


threads = []
for _ in range(pairs):
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for f, s in ((pump, a), (drain, b), (pump, b), (drain, a)):
        t = threading.Thread(target=f, args=(s,), daemon=True)
        t.start()
        threads.append(t)
time.sleep(max(0.0, stop - time.monotonic()))
print(f"moved {moved[0] / 1e6:.0f} MB over loopback in {seconds:.0f} s", flush=True)
