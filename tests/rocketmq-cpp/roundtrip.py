"""An unchanged application of the real C++ RocketMQ client 0.4.4 (PyPI `rocketmq`, which
bundles librocketmq): a Producer sends COUNT single messages (send_sync, with tags and keys)
and one batch of 10 (send_batch), then a PushConsumer of a new group must receive every one
of them within a bounded time, and a PullConsumer then pulls every queue from offset 0 and
must get every one of them too. The C API has no consume-from-where setting, so the consumer
starts as the client's default (CONSUME_FROM_LAST_OFFSET) and relies on the broker giving a
new group offset 0 on a young queue, as Apache's broker does.

Usage: roundtrip.py NAMESRV [TOPIC [COUNT [GROUP]]]. Prints one line per step (SENT,
RECEIVED n of m, WRONG for a message whose tag or keys differ from those sent, PULLED n of
m, then ALL RECEIVED or MISSING); exits 0 only when every message sent was received as it was sent, 1 when some were not, 2 on a client error.

With ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY set, the producer and both consumers sign
every request with them (RocketMQ ACL 1.0, the client's set_session_credentials), as an
application configured for an ACL-enabled cluster does.
"""

import os
import sys
import threading
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, SendStatus

NS = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:19876"
TOPIC = sys.argv[2] if len(sys.argv) > 2 else "TopicTest"
COUNT = int(sys.argv[3]) if len(sys.argv) > 3 else 3
GROUP = sys.argv[4] if len(sys.argv) > 4 else "CppRoundtripGroup"


def fail(what):
    print("ERROR", what, flush=True)
    sys.exit(2)


ACCESS_KEY = os.environ.get("ROCKETMQ_ACCESS_KEY", "")


def sign_as_configured(client):
    """Gives the client the environment's credentials, when there are any."""
    if ACCESS_KEY:
        client.set_session_credentials(
            ACCESS_KEY, os.environ.get("ROCKETMQ_SECRET_KEY", ""), "ALIYUN"
        )


producer = Producer("CppRoundtripProducer")
producer.set_namesrv_addr(NS)
sign_as_configured(producer)
producer.start()

sent = set()
expect = {}  # body -> (tag, keys) it was sent with
for i in range(COUNT):
    body = "single-%d" % i
    m = Message(TOPIC)
    tag, key = ("TagA" if i % 2 == 0 else "TagB"), "key-%d" % i
    m.set_tags(tag)
    m.set_keys(key)
    expect[body] = (tag, key)
    m.set_body(body)
    try:
        r = producer.send_sync(m)
    except Exception as e:  # the client raises on any failed send
        fail("send %d: %r" % (i, e))
    if r.status != SendStatus.OK:
        fail("send %d: status %s" % (i, r.status))
    sent.add(body)

batch = []
for i in range(10):
    body = "batch-%d" % i
    m = Message(TOPIC)
    m.set_tags("TagC")
    m.set_body(body)
    expect[body] = ("TagC", "")
    batch.append(m)
try:
    br = producer.send_batch(batch)
except Exception as e:
    fail("send_batch: %r" % (e,))
if br.status != SendStatus.OK:
    fail("send_batch: status %s" % (br.status,))
sent.update("batch-%d" % i for i in range(10))
print("SENT %d, batch %s" % (len(sent), br.status.name), flush=True)

lock = threading.Lock()
received = set()
wrong = []
done = threading.Event()


def on_message(m):
    body = m.body.decode("utf-8", "replace")
    got = tuple((v or b"").decode("utf-8", "replace") for v in (m.tags, m.keys))
    with lock:
        if expect.get(body) != got:
            wrong.append("%s: tag, keys %r, want %r" % (body, got, expect.get(body)))
        received.add(body)
        if sent <= received:
            done.set()


consumer = PushConsumer(GROUP)
consumer.set_namesrv_addr(NS)
consumer.set_instance_name("roundtrip-consumer")
sign_as_configured(consumer)
consumer.subscribe(TOPIC, on_message, "*")
consumer.start()
done.wait(40)
with lock:
    missing = sorted(sent - received)
    got = len(sent & received)
print(
    "RECEIVED %d of %d%s" % (got, len(sent), " missing %s" % missing if missing else ""),
    flush=True,
)
for w in wrong:
    print("WRONG", w, flush=True)
consumer.shutdown()



class BrokerAwarePullConsumer(PullConsumer):
    """The binding's PullConsumer keeps its offsets by topic and queue id only
    (`_get_mq_key`), so with two brokers holding the topic (two corvus cores, or two RocketMQ
    masters) the second broker's queue 0 starts where the first's ended and its messages are
    skipped. Keyed by broker name too, as every other RocketMQ client keys a message queue."""

    def _get_mq_key(self, mq):
        return "%s@%s@%s" % (mq.topic, mq.brokerName, mq.queueId)


# The pull consumer: each queue from offset 0 (the binding keeps its offsets between calls)
# until it has everything, bounded in time.
puller = BrokerAwarePullConsumer(GROUP + "Pull")
puller.set_namesrv_addr(NS)
sign_as_configured(puller)
puller.start()
pulled = set()
deadline = time.time() + 30
while not sent <= pulled and time.time() < deadline:
    for m in puller.pull(TOPIC):
        body = m.body.decode("utf-8", "replace")
        got_fields = tuple((v or b"").decode("utf-8", "replace") for v in (m.tags, m.keys))
        if expect.get(body) != got_fields:
            wrong.append("pulled %s: tag, keys %r, want %r" % (body, got_fields, expect.get(body)))
        pulled.add(body)
    time.sleep(0.2)
puller.shutdown()
print("PULLED %d of %d" % (len(sent & pulled), len(sent)), flush=True)
missing = sorted(set(missing) | (sent - pulled))
producer.shutdown()
if wrong:
    sys.exit(1)
if missing:
    print("MISSING", len(missing), flush=True)
    sys.exit(1)
print("ALL RECEIVED", flush=True)
sys.exit(0)
