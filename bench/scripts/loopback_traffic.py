#!/usr/bin/env python3
"""Loopback TCP traffic that touches no broker: the control for a neighbour's own kernel work.

usage: loopback_traffic.py PAIRS WRITE_BYTES SECONDS [SINK_CPU]

Opens PAIRS connected socket pairs on 127.0.0.1, and for SECONDS each side of each pair writes
WRITE_BYTES at a time as fast as the kernel takes them while reading what the other side
writes. Its cost is almost all the kernel's (copies, TCP, loopback delivery), run in the
context of this process on whatever CPU it is pinned to. Prints the bytes moved.

With SINK_CPU the traffic goes one way, as a producer's to a broker: this process only
writes, and the reading ends are in a child process pinned to SINK_CPU under SCHED_IDLE, so
the bytes cross from this CPU to that one and the reader gives way to anything else there.
"""
import os
import socket
import sys
import threading
import time

pairs, write, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sink_cpu = int(sys.argv[4]) if len(sys.argv) > 4 else None
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
    buf = bytearray(1 << 20)
    try:
        while time.monotonic() < stop:
            got = s.recv_into(buf)
            if not got:
                return
            moved[0] += got
    except OSError:
        pass


def run(threads):
    for f, s in threads:
        t = threading.Thread(target=f, args=(s,), daemon=True)
        t.start()
    time.sleep(max(0.0, stop - time.monotonic()))


if sink_cpu is not None:
    writers = [socket.create_connection(listener.getsockname()) for _ in range(pairs)]
    readers = [listener.accept()[0] for _ in range(pairs)]
    if os.fork() == 0:
        # The writers' ends are the parent's: once it ends, every read sees the close.
        for s in writers:
            s.close()
        os.sched_setaffinity(0, {sink_cpu})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        run([(drain, s) for s in readers])
        print(f"moved {moved[0] / 1e6:.0f} MB over loopback to CPU {sink_cpu} in {seconds:.0f} s",
              flush=True)
        os._exit(0)
    for s in readers:
        s.close()
    run([(pump, s) for s in writers])
    os.wait()
    sys.exit(0)

threads = []
for _ in range(pairs):
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threads += [(pump, a), (drain, b), (pump, b), (drain, a)]
run(threads)
print(f"moved {moved[0] / 1e6:.0f} MB over loopback in {seconds:.0f} s", flush=True)
