package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Delayed messages as a RocketMQ 4.9 application sends them: setDelayTimeLevel(1) (1 s) and
 * (2) (5 s) with the default levels, and __STARTDELIVERTIME (a time) set as a user property.
 * A push consumer must get each once, not before its time (measured from the send on this
 * host's clock, the broker's), with the properties RocketMQ's delivered copy carries: its
 * delay level (getDelayTimeLevel()) or delivery time as sent, REAL_TOPIC and REAL_QID (the
 * topic and queue it was bound for, where it arrives) and CLUSTER (the broker's cluster).
 *
 * Usage: Delayed NAMESRV TOPIC GROUP [CLUSTER]. Exits 0 once every message came on time
 * with those properties (CLUSTER: DefaultCluster when not given).
 */
public class Delayed {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        String cluster = args.length > 3 ? args[3] : "DefaultCluster";

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("delayed-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        Map<String, Long> due = new ConcurrentHashMap<>();
        Map<String, Integer> received = new ConcurrentHashMap<>();
        Map<String, String> wrong = new ConcurrentHashMap<>();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                received.merge(body, 1, Integer::sum);
                Long at = due.get(body);
                if (at == null) {
                    wrong.put(body, "unknown");
                } else if (now < at) {
                    wrong.put(body, "early by " + (at - now) + " ms");
                } else {
                    String missing = "";
                    int level = body.startsWith("level") ? body.charAt(5) - '0' : 0;
                    if (m.getDelayTimeLevel() != level) {
                        missing += " delay level " + m.getDelayTimeLevel() + " (sent " + level + ")";
                    }
                    if (level == 0 && m.getProperty("__STARTDELIVERTIME") == null) {
                        missing += " no __STARTDELIVERTIME";
                    }
                    if (!topic.equals(m.getProperty("REAL_TOPIC"))) {
                        missing += " REAL_TOPIC " + m.getProperty("REAL_TOPIC");
                    }
                    if (!String.valueOf(m.getQueueId()).equals(m.getProperty("REAL_QID"))) {
                        missing += " REAL_QID " + m.getProperty("REAL_QID") + " (queue " + m.getQueueId() + ")";
                    }
                    if (!cluster.equals(m.getProperty("CLUSTER"))) {
                        missing += " CLUSTER " + m.getProperty("CLUSTER");
                    }
                    if (!missing.isEmpty()) {
                        wrong.put(body, "delivered with" + missing);
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer("JavaDelayedProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("delayed-producer");
        producer.start();
        int count = 0;
        for (int i = 0; i < 5; i++) {
            for (int level : new int[] {1, 2}) {
                String body = "level" + level + "-" + i;
                Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                m.setDelayTimeLevel(level);
                due.put(body, System.currentTimeMillis() + (level == 1 ? 1000 : 5000));
                SendResult r = producer.send(m);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    System.out.println("SEND FAILED " + r);
                    System.exit(2);
                }
                count++;
            }
            String body = "time-" + i;
            Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
            long at = System.currentTimeMillis() + 2000;
            m.putUserProperty("__STARTDELIVERTIME", Long.toString(at));
            due.put(body, at);
            producer.send(m);
            count++;
        }
        System.out.println("SENT " + count);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (received.size() < count && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        // A second delivery would come right after the first: wait a little for one.
        Thread.sleep(500);
        long dups = received.values().stream().filter(n -> n > 1).count();
        System.out.println("RECEIVED " + received.size() + " of " + count + ", duplicates " + dups
            + (wrong.isEmpty() ? "" : " wrong " + wrong));
        consumer.shutdown();
        producer.shutdown();
        boolean ok = received.size() == count && dups == 0 && wrong.isEmpty();
        System.out.println(ok ? "ALL ON TIME" : "NOT ALL ON TIME");
        System.exit(ok ? 0 : 1);
    }
}
