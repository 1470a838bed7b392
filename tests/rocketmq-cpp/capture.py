"""Drives the real C++ RocketMQ client 0.4.4 (PyPI `rocketmq`, librocketmq bundled) against
remoting/examples/capture_server.rs on loopback: one send and one batch send, then a push
consumer that must receive the single message. Exits 0 only if it round-tripped."""

import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer

NS = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:19876"

producer = Producer("CppCaptureProducerGroup")
producer.set_namesrv_addr(NS)
producer.start()
msg = Message("TopicTest")
msg.set_keys("key1 key2")
msg.set_tags("TagA")
msg.set_body("hello from cpp")
ret = producer.send_sync(msg)
print("SEND", ret.status, ret.msg_id, ret.offset, flush=True)
batch = []
for body in ("cpp batch one", "cpp batch two"):
    b = Message("TopicTest")
    b.set_tags("TagB")
    b.set_body(body)
    batch.append(b)
ret = producer.send_batch(batch)
print("BATCH", ret.status, ret.msg_id, ret.offset, flush=True)

got = threading.Event()


def on_message(m):
    print("RECV", m.topic, m.tags, m.keys, m.body, m.id, m.queue_offset, flush=True)
    if m.body == b"hello from cpp":
        got.set()


consumer = PushConsumer("CppCaptureConsumerGroup")
consumer.set_namesrv_addr(NS)
consumer.subscribe("TopicTest", on_message, "TagA || TagB")
consumer.start()
ok = got.wait(20)
print("ALL RECEIVED" if ok else "MISSING", flush=True)
consumer.shutdown()
producer.shutdown()
sys.exit(0 if ok else 1)
