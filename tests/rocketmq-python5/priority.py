"""Priority messages (RocketMQ 5.4) through RocketMQ 5's gRPC SDK for Python
(`rocketmq-python-client` 5.1.2: `Message.priority`), the Python side of
`tests/rocketmq-v52`'s Java program, with the same modes and output lines:

    priority.py send ENDPOINT TOPIC ROUNDS       each round sends priorities 0..9, lowest first;
                                                 prints SENT p<P>-r<R> per acknowledged send
    priority.py receive ENDPOINT TOPIC GROUP N   a SimpleConsumer receives (batches of 16) and
                                                 acks until N distinct messages came; prints
                                                 RECEIVED p<P>-r<R> priority=<P> broker=? per
                                                 message

Ends with `OK` and exit 0, or `FAILED cause` and exit 1. Waits are bounded.
"""

import os
import sys
import time
import traceback

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message,
                      Producer, SimpleConsumer)

INVISIBLE = 30
RECEIVE_LIMIT = 90
AWAIT = 3


def send(cfg, topic, rounds):
    p = Producer(cfg, (topic,))
    p.startup()
    try:
        for r in range(rounds):
            for prio in range(10):
                body = f"p{prio}-r{r}"
                m = Message()
                m.topic = topic
                m.tag = "TagA"
                m.keys = f"key-{body}"
                m.body = body.encode("utf-8")
                m.priority = prio
                receipt = p.send(m)
                if not receipt.message_id:
                    raise RuntimeError(f"no message id for {body}")
                print(f"SENT {body}", flush=True)
    finally:
        p.shutdown()


def receive(cfg, topic, group, expected):
    c = SimpleConsumer(cfg, group, {topic: FilterExpression("*")}, AWAIT)
    c.startup()
    seen = set()
    deadline = time.monotonic() + RECEIVE_LIMIT
    try:
        while len(seen) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"received {len(seen)} of {expected} in {RECEIVE_LIMIT} s")
            for m in c.receive(16, INVISIBLE):
                body = m.body.decode("utf-8")
                priority = "none" if m.priority is None else str(m.priority)
                # The SDK does not show which broker a message came from.
                print(f"RECEIVED {body} priority={priority} broker=?", flush=True)
                seen.add(body)
                c.ack(m)
    finally:
        c.shutdown()


def main(argv):
    if len(argv) < 4:
        print("usage: priority.py send ENDPOINT TOPIC ROUNDS | receive ENDPOINT TOPIC GROUP N",
              file=sys.stderr)
        return 2
    cfg = ClientConfiguration(argv[1], Credentials(), request_timeout=5)
    try:
        if argv[0] == "send":
            send(cfg, argv[2], int(argv[3]))
        elif argv[0] == "receive":
            receive(cfg, argv[2], argv[3], int(argv[4]))
        else:
            raise ValueError(f"unknown mode {argv[0]}")
        print("OK", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - the verdict line says what failed
        print(f"FAILED {e!r}", flush=True)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    # The SDK's threads may outlive shutdown(): leave at once with the verdict.
    os._exit(status)
