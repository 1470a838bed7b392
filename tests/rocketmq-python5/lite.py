"""Lite Topics (RocketMQ 5.5) through RocketMQ 5's gRPC SDK for Python
(`rocketmq-python-client` 5.1.2: `Message.lite_topic`, `LitePushConsumer`,
`LiteSimpleConsumer`), the Python side of `tests/rocketmq-v52`'s `corvus.v52.Lite`, with the
same modes and output lines:

    lite.py send ENDPOINT TOPIC LITES N
        sends N messages to each lite topic of LITES (comma-separated), the lite topics in
        turn; body "LITE#K"; prints SENT LITE#K per acknowledged send
    lite.py consume ENDPOINT TOPIC GROUP LITES TOTAL [FAIL_ONCE]
        a LitePushConsumer subscribes each lite topic of LITES and consumes until TOTAL
        distinct messages succeeded; prints RECEIVED LITE#K lite=L attempt=A per delivery, in
        the order the listener saw them; the first delivery of FAIL_ONCE (a body) fails once.
        Then it unsubscribes the first lite topic of LITES and prints its lite topic set
        (SUBSCRIBED L,...)
    lite.py receive ENDPOINT TOPIC GROUP LITES TOTAL [SKIP_ONCE]
        a LiteSimpleConsumer subscribes each lite topic of LITES, then receives (batches of
        16) and acks until TOTAL distinct messages were acked; prints RECEIVED lines as
        `consume` does, in the order received; the first delivery of SKIP_ONCE (a body) is
        not acked, so it comes back once its invisible time passes

Ends with `OK` and exit 0, or `FAILED cause` and exit 1. Waits are bounded.
"""

import os
import sys
import threading
import time
import traceback

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, LitePushConsumer,
                      LiteSimpleConsumer, Message, MessageListener, Producer)
from rocketmq.v5.exception import LiteSubscriptionQuotaExceededException

CONSUME_LIMIT = 90
# A skipped message comes back after this (the shortest invisible time a broker takes).
INVISIBLE = 10
AWAIT = 3
SETTLE_LIMIT = 10


def send(cfg, topic, lites, n):
    p = Producer(cfg, (topic,))
    p.startup()
    try:
        for k in range(n):
            for lite in lites:
                body = f"{lite}#{k}"
                m = Message()
                m.topic = topic
                m.lite_topic = lite
                m.keys = f"key-{body}"
                m.body = body.encode("utf-8")
                receipt = p.send(m)
                if not receipt.message_id:
                    raise RuntimeError(f"no message id for {body}")
                print(f"SENT {body}", flush=True)
    finally:
        p.shutdown()


class Listener(MessageListener):
    def __init__(self, fail_once):
        self.fail_once = fail_once
        self.failed = set()
        self.done = set()
        self.bad = False
        self.lock = threading.Lock()

    def consume(self, message):
        body = message.body.decode("utf-8")
        lite = message.lite_topic or "?"
        with self.lock:
            print(f"RECEIVED {body} lite={lite} attempt={message.delivery_attempt}", flush=True)
            if not body.startswith(lite + "#"):
                self.bad = True
            if body == self.fail_once and body not in self.failed:
                self.failed.add(body)
                return ConsumeResult.FAILURE
            self.done.add(body)
            return ConsumeResult.SUCCESS


def consume(cfg, topic, group, lites, total, fail_once):
    listener = Listener(fail_once)
    c = LitePushConsumer(cfg, group, topic, listener)
    c.startup()
    try:
        for lite in lites:
            c.subscribe_lite(lite)
        resync(c)
        deadline = time.monotonic() + CONSUME_LIMIT
        while time.monotonic() < deadline:
            with listener.lock:
                if len(listener.done) >= total:
                    break
            time.sleep(0.05)
        with listener.lock:
            done = sorted(listener.done)
            bad = listener.bad
        if len(done) < total:
            raise RuntimeError(f"consumed {len(done)} of {total}: {done}")
        if bad:
            raise RuntimeError("a message came with another lite topic than its own")
        c.unsubscribe_lite(lites[0])
        # 5.1.2 has no public accessor for the consumer's lite topic set.
        subscribed = c._LitePushConsumer__subscription_manager.lite_topics
        print(f"SUBSCRIBED {','.join(sorted(subscribed))}", flush=True)
    finally:
        c.shutdown()


def resync(consumer):
    """Sends the consumer's whole lite topic set now. 5.1.2's subscribe_lite sends the
    broker the characters of the lite topic's name as its set (`lite_topic_set.extend(name)`),
    so the broker hears of the real lite topics only when the whole set is sent, which the SDK
    does every 30 s and subscribe_lite_all() does at once."""
    consumer.subscribe_lite_all()


def subscribe_when_settled(consumer, lite):
    """Subscribes `lite` once the consumer knows its quota. A LiteSimpleConsumer's startup
    does not wait for the broker's settings (a LitePushConsumer's does), and until they come
    its quota is 0 and subscribe_lite refuses everything."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while True:
        try:
            consumer.subscribe_lite(lite)
            return
        except LiteSubscriptionQuotaExceededException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def receive(cfg, topic, group, lites, total, skip_once):
    c = LiteSimpleConsumer(topic, cfg, group, AWAIT)
    c.startup()
    acked = set()
    skipped = set()
    deadline = time.monotonic() + CONSUME_LIMIT
    try:
        for lite in lites:
            subscribe_when_settled(c, lite)
        resync(c)
        while len(acked) < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"acked {len(acked)} of {total} in {CONSUME_LIMIT} s: {sorted(acked)}")
            for m in c.receive(16, INVISIBLE):
                body = m.body.decode("utf-8")
                lite = m.lite_topic or "?"
                print(f"RECEIVED {body} lite={lite} attempt={m.delivery_attempt}", flush=True)
                if not body.startswith(lite + "#"):
                    raise RuntimeError(f"{body} came with lite topic {lite}")
                if body == skip_once and body not in skipped:
                    skipped.add(body)
                    continue
                c.ack(m)
                acked.add(body)
    finally:
        c.shutdown()


def main(argv):
    if len(argv) < 5:
        print("usage: lite.py send ENDPOINT TOPIC LITES N"
              " | consume|receive ENDPOINT TOPIC GROUP LITES TOTAL [BODY]", file=sys.stderr)
        return 2
    cfg = ClientConfiguration(argv[1], Credentials(), request_timeout=5)
    try:
        if argv[0] == "send":
            send(cfg, argv[2], argv[3].split(","), int(argv[4]))
        elif argv[0] in ("consume", "receive"):
            once = argv[6] if len(argv) > 6 else None
            run = consume if argv[0] == "consume" else receive
            run(cfg, argv[2], argv[3], argv[4].split(","), int(argv[5]), once)
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
