package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Two push consumers of one group, the second starting while messages flow. The first must
 * give up the second's queues at once: the broker tells it the group changed
 * (NOTIFY_CONSUMER_IDS_CHANGED) and it rebalances then, instead of at its next rebalance
 * 20 s later, during which both would consume those queues.
 *
 * Usage: Rebalance NAMESRV TOPIC GROUP. Three seconds after the second member joined, every
 * message sent is received by exactly one member, and each member receives some: exit 0.
 */
public class Rebalance {
    static DefaultMQPushConsumer member(String ns, String topic, String group, String name,
            Set<Integer> got) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                got.add(Integer.parseInt(body.substring(2)));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];

        DefaultMQProducer producer = new DefaultMQProducer("JavaRebalanceProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("rebalance-producer");
        producer.start();
        AtomicBoolean sending = new AtomicBoolean(true);
        AtomicInteger next = new AtomicInteger();
        Thread sender = new Thread(() -> {
            while (sending.get()) {
                try {
                    int i = next.get();
                    producer.send(new Message(topic, ("m-" + i).getBytes(StandardCharsets.UTF_8)));
                    next.incrementAndGet();
                    Thread.sleep(5);
                } catch (Exception e) {
                    System.out.println("SEND ERROR " + e);
                }
            }
        });
        sender.start();

        Set<Integer> a = ConcurrentHashMap.newKeySet();
        Set<Integer> b = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer first = member(ns, topic, group, "rebalance-a", a);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (a.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        System.out.println("FIRST CONSUMING " + !a.isEmpty());
        Thread.sleep(2000);

        DefaultMQPushConsumer second = member(ns, topic, group, "rebalance-b", b);
        Thread.sleep(3000);
        int from = next.get();
        Thread.sleep(3000);
        sending.set(false);
        sender.join();
        int to = next.get();
        // Everything sent in the window is delivered (bounded wait), then counted.
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        int both = 0, none = 0, onlyA = 0, onlyB = 0;
        while (true) {
            both = 0; none = 0; onlyA = 0; onlyB = 0;
            for (int i = from; i < to; i++) {
                boolean inA = a.contains(i), inB = b.contains(i);
                if (inA && inB) both++;
                else if (inA) onlyA++;
                else if (inB) onlyB++;
                else none++;
            }
            if (none == 0 || System.nanoTime() > deadline) break;
            Thread.sleep(50);
        }
        System.out.println("WINDOW " + (to - from) + " messages: first only " + onlyA
            + ", second only " + onlyB + ", both " + both + ", neither " + none);
        second.shutdown();
        first.shutdown();
        producer.shutdown();
        boolean ok = to > from && both == 0 && none == 0 && onlyA > 0 && onlyB > 0;
        System.out.println(ok ? "SHARED WITHOUT DUPLICATES" : "NOT SHARED");
        System.exit(ok ? 0 : 1);
    }
}
