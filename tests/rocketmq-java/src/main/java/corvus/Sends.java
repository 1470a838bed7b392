package corvus;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The producer's other ways to send, and an orderly consumer: COUNT messages sent async
 * (SendCallback), COUNT oneway, and KEYS x PER_KEY messages sent with a MessageQueueSelector
 * choosing the queue by key; then a DefaultMQPushConsumer with a MessageListenerOrderly (the
 * broker locks its queues: LOCK_BATCH_MQ) must receive every message, and each key's
 * messages exactly once and in the order sent.
 *
 * Usage: Sends NAMESRV TOPIC COUNT GROUP. Prints ASYNC OK, ONEWAY SENT, ORDERED SENT,
 * RECEIVED ..., KEYS IN ORDER and ALL RECEIVED; exits 0 only if all held.
 */
public class Sends {
    static final int KEYS = 8;
    static final int PER_KEY = 25;

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];

        DefaultMQProducer producer = new DefaultMQProducer("JavaSendsProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("sends-producer");
        producer.start();
        Set<String> sent = ConcurrentHashMap.newKeySet();

        // Async: every callback must say SEND_OK.
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger ok = new AtomicInteger();
        List<String> failures = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String body = "async-" + i;
            sent.add(body);
            producer.send(new Message(topic, "Async", body.getBytes(StandardCharsets.UTF_8)),
                new SendCallback() {
                    public void onSuccess(SendResult r) {
                        if (r.getSendStatus() == SendStatus.SEND_OK) ok.incrementAndGet();
                        done.countDown();
                    }
                    public void onException(Throwable e) {
                        synchronized (failures) { failures.add(e.toString()); }
                        done.countDown();
                    }
                });
        }
        boolean all = done.await(30, TimeUnit.SECONDS);
        System.out.println("ASYNC " + (all && ok.get() == count ? "OK " : "FAILED ") + ok.get()
            + " of " + count + (failures.isEmpty() ? "" : " " + failures));

        for (int i = 0; i < count; i++) {
            String body = "oneway-" + i;
            sent.add(body);
            producer.sendOneway(new Message(topic, "Oneway", body.getBytes(StandardCharsets.UTF_8)));
        }
        System.out.println("ONEWAY SENT " + count);

        MessageQueueSelector byKey = (mqs, msg, arg) -> mqs.get(Math.abs(arg.hashCode()) % mqs.size());
        Set<String> orderedQueues = new java.util.TreeSet<>();
        for (int s = 0; s < PER_KEY; s++) {
            for (int k = 0; k < KEYS; k++) {
                String key = "order-" + k;
                String body = key + ":" + s;
                sent.add(body);
                SendResult r = producer.send(new Message(topic, "Ordered", key,
                    body.getBytes(StandardCharsets.UTF_8)), byKey, key);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    System.out.println("ORDERED SEND FAILED " + r);
                    System.exit(2);
                }
                MessageQueue q = r.getMessageQueue();
                orderedQueues.add(q.getBrokerName() + "/" + q.getQueueId());
            }
        }
        System.out.println("ORDERED SENT " + KEYS * PER_KEY + " to " + orderedQueues.size() + " queues");

        Set<String> received = ConcurrentHashMap.newKeySet();
        Map<String, List<Integer>> perKey = new ConcurrentHashMap<>();
        AtomicInteger deliveries = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("sends-orderly-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                deliveries.incrementAndGet();
                received.add(body);
                if (body.startsWith("order-")) {
                    String[] kv = body.split(":");
                    perKey.computeIfAbsent(kv[0], x -> java.util.Collections.synchronizedList(new ArrayList<>()))
                        .add(Integer.parseInt(kv[1]));
                }
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
        while (!received.containsAll(sent) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        Set<String> missing = new java.util.TreeSet<>(sent);
        missing.removeAll(received);
        System.out.println("RECEIVED " + received.size() + " of " + sent.size() + " in "
            + deliveries.get() + " deliveries" + (missing.isEmpty() ? "" : " missing " + missing));
        boolean inOrder = true;
        Map<String, List<Integer>> sorted = new TreeMap<>(perKey);
        for (int k = 0; k < KEYS; k++) {
            List<Integer> got = sorted.get("order-" + k);
            List<Integer> want = new ArrayList<>();
            for (int s = 0; s < PER_KEY; s++) want.add(s);
            if (got == null || !want.equals(new ArrayList<>(got))) {
                inOrder = false;
                System.out.println("KEY order-" + k + " GOT " + got);
            }
        }
        System.out.println(inOrder ? "KEYS IN ORDER" : "KEYS OUT OF ORDER");
        consumer.shutdown();
        producer.shutdown();
        boolean pass = all && ok.get() == count && missing.isEmpty() && inOrder;
        if (pass) System.out.println("ALL RECEIVED");
        System.exit(pass ? 0 : 1);
    }
}
