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
 * host's clock, the broker's), and with the delivery-time keys gone.
 *
 * Usage: Delayed NAMESRV TOPIC GROUP. Exits 0 once every message came on time.
 */
public class Delayed {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];

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
                } else if (m.getProperty("DELAY") != null || m.getProperty("__STARTDELIVERTIME") != null) {
                    wrong.put(body, "still has its delay keys");
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
