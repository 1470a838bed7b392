"""RocketMQ 5's gRPC SDK for Python (rocketmq-python-client) scenarios against one gRPC endpoint.

Usage: scenarios.py ENDPOINT SCENARIO [--topic T] [--group G]

The same scenarios, topics, groups and transcript lines as the Java program
(tests/rocketmq-v5/src/main/java/corvus/v5/Scenarios.java), so a transcript compares with
tests/rocketmq-v5/expected/<scenario>.txt. Each scenario prints a deterministic transcript on
stdout and ends with `OK SCENARIO` and exit 0 when everything it asserts held, or
`FAILED SCENARIO: cause` and exit 1. Every wait is bounded; nothing sleeps to assert. Timings
and other details that vary go to stderr as `note:` lines. Plaintext (the SDK's default,
`tls_enable=False`).
"""

import os
import sys
import threading
import time
import traceback

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials,
                      FilterExpression, Message, MessageListener, Producer,
                      PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)

# Scenario -> its topic and the topic's message type (the harness creates them).
TOPICS = {
    "produce": ("V5Normal", "NORMAL"),
    "fifo": ("V5Fifo", "FIFO"),
    "delay": ("V5Delay", "DELAY"),
    "delay-receive": ("V5DelayRecv", "DELAY"),
    "transaction-send": ("V5TxnSend", "TRANSACTION"),
    "transaction": ("V5Txn", "TRANSACTION"),
    "simple": ("V5Simple", "NORMAL"),
    "push": ("V5Push", "NORMAL"),
    "fifo-push": ("V5FifoPush", "FIFO"),
    "share": ("V5Share", "NORMAL"),
}

# The receive's long-polling wait, seconds.
AWAIT = 3
# The smallest invisible duration Apache's Proxy accepts on receive, seconds.
INVISIBLE = 10
T0 = time.monotonic()


def say(line):
    print(line, flush=True)


def note(line):
    print(f"note: {line}", file=sys.stderr, flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def wait_until(limit, cond):
    """Waits until cond() holds, at most limit seconds; False if it never did."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def body(m):
    return m.body.decode("utf-8")


def now_ms():
    return int(time.time() * 1000)


def two_seconds_ahead():
    """A delivery timestamp (epoch ms) 2 to 3 s ahead, of whole seconds: the Python SDK sends
    its message's `delivery_timestamp` in seconds."""
    return (int(time.time()) + 3) * 1000


class Scenarios:
    def __init__(self, endpoint, topic, group):
        self.cfg = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
        self.topic = topic
        self.group = group
        self.started = []

    def close(self):
        for c in reversed(self.started):
            try:
                c.shutdown()
            except Exception as e:  # noqa: BLE001 - shutting down, report only
                note(f"shutdown: {e}")
        self.started = []

    def start(self, client):
        client.startup()
        self.started.append(client)
        return client

    def message(self, text, group=None, delivery=None):
        """A message of the scenario's topic; `delivery`: its delivery timestamp in epoch ms, a
        whole second (the SDK sends `delivery_timestamp` in seconds, and reads it back in ms)."""
        m = Message()
        m.topic = self.topic
        m.tag = "TagA"
        m.keys = f"key-{text}"
        m.body = text.encode("utf-8")
        if group is not None:
            m.message_group = group
        if delivery is not None:
            check(delivery % 1000 == 0, "a delivery timestamp of whole seconds")
            m.delivery_timestamp = delivery // 1000
        return m

    def producer(self, checker=None):
        return self.start(Producer(self.cfg, (self.topic,), checker))

    def simple_consumer(self, topic, group):
        return self.start(
            SimpleConsumer(self.cfg, group, {topic: FilterExpression("*")}, AWAIT)
        )

    def send(self, p, m, text, transaction=None):
        r = p.send(m, transaction)
        check(r.message_id, f"a message id for {text}")
        say(f"SENT {text} id=yes")

    @staticmethod
    def receive_until(c, invisible, limit, done, each):
        """Receives until done() holds or limit seconds passed; False if it never held."""
        deadline = time.monotonic() + limit
        while not done():
            if time.monotonic() > deadline:
                return False
            for m in c.receive(16, invisible):
                each(m)
        return True

    # ---- scenarios ----

    def produce(self):
        p = self.producer()
        for i in range(3):
            b = f"normal-{i}"
            self.send(p, self.message(b), b)

    def fifo(self):
        p = self.producer()
        for i in range(3):
            for g in ("a", "b"):
                b = f"fifo-{g}-{i}"
                self.send(p, self.message(b, group=f"group-{g}"), b)

    def delay(self):
        p = self.producer()
        self.send(p, self.message("delay-0", delivery=two_seconds_ahead()), "delay-0")

    def delay_receive(self):
        p = self.producer()
        c = self.simple_consumer(self.topic, self.group)
        due = two_seconds_ahead()
        self.send(p, self.message("delay-1", delivery=due), "delay-1")
        got = []
        at = [0]

        def each(m):
            at[0] = now_ms()
            got.append(m)
            c.ack(m)

        ok = self.receive_until(c, INVISIBLE, 40, lambda: got, each)
        check(ok, "the delayed message arrived within 40 s")
        m = got[0]
        note(f"delay-1 arrived {at[0] - due} ms after its delivery timestamp")
        say(f"RECEIVED {body(m)} attempt={m.delivery_attempt}")
        check(at[0] >= due - 1000, f"not early: arrived {due - at[0]} ms before its time")
        say("NOT EARLY")
        check(
            m.delivery_timestamp == due,
            f"the delivery timestamp is carried: {m.delivery_timestamp}",
        )
        say("DELIVERY TIMESTAMP carried")

    def transactional_producer(self, checked):
        class Checker(TransactionChecker):
            def check(self, message):
                b = body(message)
                if b not in checked:
                    checked.add(b)
                    note(f"the broker checked {b}")
                if b.endswith("-unknown"):
                    return TransactionResolution.COMMIT
                return TransactionResolution.ROLLBACK

        return self.producer(Checker())

    def send_in_transaction(self, p, text):
        t = p.begin_transaction()
        self.send(p, self.message(text), text, t)
        return t

    def transaction_send(self):
        checked = set()
        p = self.transactional_producer(checked)
        self.send_in_transaction(p, "txn-commit").commit()
        say("COMMITTED txn-commit")
        self.send_in_transaction(p, "txn-rollback").rollback()
        say("ROLLED BACK txn-rollback")

    def transaction(self):
        checked = set()
        p = self.transactional_producer(checked)
        c = self.simple_consumer(self.topic, self.group)
        self.send_in_transaction(p, "txn-commit").commit()
        say("COMMITTED txn-commit")
        self.send_in_transaction(p, "txn-rollback").rollback()
        say("ROLLED BACK txn-rollback")
        self.send_in_transaction(p, "txn-unknown")
        say("LEFT OPEN txn-unknown")
        check(
            wait_until(60, lambda: "txn-unknown" in checked),
            "the broker checked txn-unknown back within 60 s",
        )
        say("CHECKED txn-unknown -> COMMIT")
        got = set()
        order = []

        def each(m):
            b = body(m)
            if b not in got:
                got.add(b)
                order.append(b)
            c.ack(m)

        ok = self.receive_until(
            c, INVISIBLE, 60, lambda: {"txn-commit", "txn-unknown"} <= got, each
        )
        check(ok, f"the committed messages arrived within 60 s, got {order}")
        # One more receive past them: the rolled-back message is not there either.
        for m in c.receive(16, INVISIBLE):
            got.add(body(m))
            c.ack(m)
        say("RECEIVED " + " ".join(sorted(got)))
        check("txn-rollback" not in got, "the rolled-back message was never delivered")
        say("NEVER txn-rollback")
        check(
            "txn-commit" not in checked and "txn-rollback" not in checked,
            f"only the open transaction was checked, checked {checked}",
        )

    def simple(self):
        p = self.producer()
        c = self.simple_consumer(self.topic, self.group)
        for i in range(3):
            b = f"simple-{i}"
            self.send(p, self.message(b), b)
        first = {}
        received_at = [0.0]

        def each_first(m):
            b = body(m)
            check(b not in first, f"no second delivery of {b} within its invisible time")
            first[b] = m
            if b == "simple-2":
                received_at[0] = time.monotonic()

        ok = self.receive_until(c, INVISIBLE, 30, lambda: len(first) == 3, each_first)
        check(ok, f"all three received within 30 s, got {sorted(first)}")
        note(f"a receipt handle as the server wrote it: {first['simple-0'].receipt_handle}")
        for b in sorted(first):
            m = first[b]
            say(
                f"RECEIVED {b} attempt={m.delivery_attempt} tag={m.tag or '-'}"
                f" keys={','.join(sorted(m.keys))}"
            )
        c.ack(first["simple-0"])
        c.ack(first["simple-1"])
        say("ACKED simple-0 simple-1")

        # simple-2 is not acked: it comes back once its invisible duration is over.
        again = []

        def each_again(m):
            check(body(m) == "simple-2", f"only simple-2 comes back, not {body(m)}")
            again.append(m)

        ok = self.receive_until(c, INVISIBLE, 60, lambda: again, each_again)
        check(ok, "simple-2 came back within 60 s")
        after = int((time.monotonic() - received_at[0]) * 1000)
        note(f"simple-2 came back {after} ms after its first receive")
        m2 = again[0]
        say(f"RECEIVED {body(m2)} attempt={m2.delivery_attempt}")
        check(m2.delivery_attempt == 2, "deliveryAttempt 2 on redelivery")
        check(
            after >= INVISIBLE * 1000 - 1000,
            f"not redelivered before its invisible duration: {after} ms",
        )
        say("REDELIVERED after the invisible duration")

        # Extended to 25 s: it stays away past the 10 s it was received with.
        extended_at = time.monotonic()
        c.change_invisible_duration(m2, 25)
        say("CHANGED invisible duration of simple-2 to 25s")
        while time.monotonic() - extended_at < INVISIBLE + 5:
            got = c.receive(16, INVISIBLE)
            check(
                not got,
                "nothing delivered while simple-2 is invisible, got "
                + (body(got[0]) if got else ""),
            )
        say("NOT REDELIVERED within 15s")
        c.ack(m2)
        say("ACKED simple-2")

    def push(self):
        attempts = {}
        lock = threading.Lock()

        class Listener(MessageListener):
            def consume(self, message):
                b = body(message)
                with lock:
                    attempts.setdefault(b, []).append(message.delivery_attempt)
                note(f"{time.monotonic() - T0:.1f} s: {b} attempt {message.delivery_attempt}")
                return ConsumeResult.FAILURE if b == "push-fail" else ConsumeResult.SUCCESS

        p = self.producer()
        self.start(
            PushConsumer(
                self.cfg,
                self.group,
                Listener(),
                {self.topic: FilterExpression("*")},
                consumption_thread_count=4,
            )
        )
        for b in ("push-0", "push-1", "push-2", "push-fail"):
            self.send(p, self.message(b), b)
        check(
            wait_until(30, lambda: {"push-0", "push-1", "push-2"} <= set(attempts)),
            f"the three consumed within 30 s: {sorted(attempts)}",
        )
        # The dead-letter topic exists once the first message went there: the SDK starts a
        # consumer of a topic that is not there yet, and its receives fail until it is.
        dlq_topic = f"%DLQ%{self.group}"
        dlq = self.simple_consumer(dlq_topic, f"{self.group}-dlq")
        dead = []
        last = [None]
        deadline = time.monotonic() + 120
        while not dead:
            check(
                time.monotonic() < deadline,
                f"push-fail received from {dlq_topic} within 120 s; attempts {attempts};"
                f" last: {last[0]}",
            )
            try:
                got = dlq.receive(16, INVISIBLE)
            except Exception as e:  # noqa: BLE001 - the topic is not there yet
                last[0] = e
                time.sleep(0.5)
                continue
            for m in got:
                dead.append(f"{body(m)} attempt={m.delivery_attempt}")
                dlq.ack(m)
        note(f"push-fail read from {dlq_topic}; attempts {attempts}")
        with lock:
            for b in sorted(attempts):
                say(f"CONSUMED {b} attempts=[{', '.join(map(str, attempts[b]))}]")
        say("DLQ " + " ".join(dead))
        check(len(attempts.get("push-fail", [])) >= 2, "push-fail retried")

    def fifo_push(self):
        seen = {}
        lock = threading.Lock()

        class Listener(MessageListener):
            def consume(self, message):
                b = body(message)
                with lock:
                    seen.setdefault(message.message_group or "-", []).append(
                        int(b.rsplit("-", 1)[1])
                    )
                note(f"{time.monotonic() - T0:.1f} s: {b}")
                return ConsumeResult.SUCCESS

        p = self.producer()
        for i in range(4):
            for g in ("a", "b"):
                b = f"fifo-{g}-{i}"
                self.send(p, self.message(b, group=f"group-{g}"), b)
        self.start(
            PushConsumer(
                self.cfg,
                self.group,
                Listener(),
                {self.topic: FilterExpression("*")},
                consumption_thread_count=4,
            )
        )
        check(
            wait_until(40, lambda: sum(len(v) for v in seen.values()) >= 8),
            f"all eight consumed within 40 s: {seen}",
        )
        with lock:
            for g in sorted(seen):
                say(f"GROUP {g} [{', '.join(map(str, seen[g]))}]")
                check(seen[g] == [0, 1, 2, 3], f"group {g} in order")

    def share(self):
        n = 8
        p = self.producer()
        a = self.simple_consumer(self.topic, self.group)
        b = self.simple_consumer(self.topic, self.group)
        for i in range(n):
            s = f"share-{i}"
            self.send(p, self.message(s), s)
        by = {}
        dup = []
        first_batch = []
        deadline = time.monotonic() + 30
        while not first_batch and time.monotonic() < deadline:
            first_batch.extend(a.receive(3, 30))
        check(first_batch, "the first consumer received within 30 s")
        for m in first_batch:
            by[body(m)] = "a"

        def each(m):
            if body(m) in by:
                dup.append(body(m))
            else:
                by[body(m)] = "b"
            b.ack(m)

        ok = self.receive_until(b, 30, 30, lambda: len(by) == n, each)
        for m in first_batch:
            a.ack(m)
        check(ok, f"all {n} received within 30 s, got {sorted(by)}")
        # One more receive on each: nothing is left, and nothing comes twice.
        for c in (a, b):
            for m in c.receive(16, INVISIBLE):
                dup.append(body(m))
                c.ack(m)
        on_a = sum(1 for v in by.values() if v == "a")
        note(f"first consumer {on_a}, second {n - on_a}")
        both = "yes" if 0 < on_a < n else "no"
        say(f"SHARED {n} distinct={len(by)} duplicates={len(dup)} both={both}")
        check(not dup, f"no message delivered to both: {dup}")
        check(0 < on_a < n, "both consumers got some")


def main(argv):
    if len(argv) < 3 or argv[2] not in TOPICS:
        print("usage: scenarios.py ENDPOINT SCENARIO [--topic T] [--group G]", file=sys.stderr)
        for k, (t, kind) in TOPICS.items():
            print(f"  {k} {t} {kind}", file=sys.stderr)
        return 2
    endpoint, scenario = argv[1], argv[2]
    topic, group = TOPICS[scenario][0], None
    rest = argv[3:]
    while rest:
        opt = rest.pop(0)
        if opt == "--topic" and rest:
            topic = rest.pop(0)
        elif opt == "--group" and rest:
            group = rest.pop(0)
        else:
            print(f"unknown option {opt}", file=sys.stderr)
            return 2
    if group is None:
        group = topic + "Group"
    t0 = time.monotonic()
    status = 0
    s = Scenarios(endpoint, topic, group)
    try:
        getattr(s, scenario.replace("-", "_"))()
        say(f"OK {scenario}")
    except BaseException as e:  # noqa: BLE001 - every failure is reported the same way
        say(f"FAILED {scenario}: {type(e).__name__}: {e}")
        traceback.print_exc()
        status = 1
    finally:
        s.close()
    print(f"scenario {scenario} took {time.monotonic() - t0:.1f} s", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK's threads are not all daemons.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
