package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A consumer that fails every message, with setMaxReconsumeTimes(MAX): each message is
 * delivered 1 + MAX times (the first time, then from the group's retry topic) and then ends in
 * the group's dead letter topic %DLQ%GROUP, where a lookup by key finds it, and from where a
 * consumer of another group reads them again (RocketMQ creates the topic readable, so dead
 * letters can be reprocessed).
 *
 * Usage: Dlq NAMESRV TOPIC COUNT GROUP MAX. Prints DELIVERIES ..., DEAD key ...,
 * REPROCESSED n of COUNT and ALL DEAD; exit 0.
 */
public class Dlq {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];
        int max = Integer.parseInt(args[4]);

        DefaultMQProducer producer = new DefaultMQProducer("JavaDlqProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("dlq-producer");
        producer.start();
        Set<String> keys = new java.util.TreeSet<>();
        for (int i = 0; i < count; i++) {
            String key = "dlq-key-" + i;
            producer.send(new Message(topic, "Dead", key, ("dlq-" + i).getBytes(StandardCharsets.UTF_8)));
            keys.add(key);
        }

        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("dlq-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(max);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                deliveries.computeIfAbsent(m.getKeys(), k -> new AtomicInteger()).incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        consumer.start();

        // Each is looked up by key in the dead letter topic until all are there.
        String dlq = "%DLQ%" + group;
        Map<String, MessageExt> dead = new TreeMap<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (dead.size() < keys.size() && System.nanoTime() < deadline) {
            Thread.sleep(500);
            for (String key : keys) {
                if (dead.containsKey(key)) continue;
                try {
                    QueryResult r = producer.queryMessage(dlq, key, 32, 0, Long.MAX_VALUE);
                    for (MessageExt m : r.getMessageList()) {
                        if (key.equals(m.getKeys())) dead.put(key, m);
                    }
                } catch (Exception e) {
                    // Not there yet (no route for the topic until the first dead message).
                }
            }
        }
        // Once dead, no further delivery: give a late one the chance to show.
        Thread.sleep(1000);
        Map<String, Integer> counts = new TreeMap<>();
        deliveries.forEach((k, v) -> counts.put(k, v.get()));
        System.out.println("DELIVERIES " + counts);
        boolean ok = dead.size() == keys.size();
        for (Map.Entry<String, MessageExt> e : dead.entrySet()) {
            MessageExt m = e.getValue();
            String body = new String(m.getBody(), StandardCharsets.UTF_8);
            System.out.println("DEAD " + e.getKey() + " topic " + m.getTopic() + " body " + body
                + " reconsumeTimes " + m.getReconsumeTimes() + " DELAY=" + m.getProperty("DELAY"));
            if (!m.getTopic().equals(dlq) || !body.equals("dlq-" + e.getKey().substring(8))) ok = false;
        }
        for (String key : keys) {
            Integer n = counts.get(key);
            if (n == null || n != 1 + max) ok = false;
        }
        consumer.shutdown();

        Set<String> again = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer reprocess = new DefaultMQPushConsumer(group + "Reprocess");
        reprocess.setNamesrvAddr(ns);
        reprocess.setInstanceName("dlq-reprocess");
        reprocess.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        reprocess.subscribe(dlq, "*");
        reprocess.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) again.add(m.getKeys());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        reprocess.start();
        long againDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!again.containsAll(keys) && System.nanoTime() < againDeadline) {
            Thread.sleep(100);
        }
        System.out.println("REPROCESSED " + again.size() + " of " + keys.size());
        if (!again.containsAll(keys)) ok = false;
        reprocess.shutdown();
        producer.shutdown();
        System.out.println(ok ? "ALL DEAD" : "NOT ALL DEAD");
        System.exit(ok ? 0 : 1);
    }
}
