package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Two push consumers of one group share the topic's queues while messages flow: while the
 * membership is stable every message is received by exactly one of them. Then the second
 * leaves (shutdown: UNREGISTER_CLIENT); the first must take its queues over within a few
 * seconds, not at its next periodic rebalance 20 s later.
 *
 * With "orderly", both members consume with a MessageListenerOrderly, which consumes a
 * queue only while the broker grants it the queue's lock (LOCK_BATCH_MQ). The leaving member
 * gives its locks back (UNLOCK_BATCH_MQ) before its shutdown persists its offsets, so
 * some of its queues may have no committed offset yet: the first must still lock them at
 * once, not when the leaver's locks run out a minute later.
 *
 * Usage: Leave NAMESRV TOPIC GROUP [orderly]. Prints STABLE ..., TAKEN OVER IN ... ms and
 * SHARED THEN TAKEN OVER; exit 0.
 */
public class Leave {
    /** A member of the group that consumes each queue in order, under the queue's lock. */
    static DefaultMQPushConsumer orderly(String ns, String topic, String group, String name,
            Set<Integer> got) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                got.add(Integer.parseInt(body.substring(2)));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        return c;
    }

    /** The queues of `topic` the member holds the broker's lock of. */
    static int locked(DefaultMQPushConsumer c, String topic) {
        int n = 0;
        for (Map.Entry<MessageQueue, ProcessQueue> e : c.getDefaultMQPushConsumerImpl()
                .getRebalanceImpl().getProcessQueueTable().entrySet()) {
            ProcessQueue pq = e.getValue();
            if (e.getKey().getTopic().equals(topic) && pq.isLocked() && !pq.isDropped()) {
                n++;
            }
        }
        return n;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        boolean inOrder = args.length > 3 && args[3].equals("orderly");

        DefaultMQProducer producer = new DefaultMQProducer("JavaLeaveProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("leave-producer");
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

        Set<Integer> a = ConcurrentHashMap.newKeySet();
        Set<Integer> b = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer first = inOrder
            ? orderly(ns, topic, group, "leave-a", a)
            : Rebalance.member(ns, topic, group, "leave-a", a);
        DefaultMQPushConsumer second = inOrder
            ? orderly(ns, topic, group, "leave-b", b)
            : Rebalance.member(ns, topic, group, "leave-b", b);
        if (inOrder) {
            // A joining member's lock of a queue the other has not given up yet fails, and it
            // tries again at its next rebalance, up to 20 s later: the two settle on their
            // halves of the 8 queues, each holding the locks of its own, before messages flow.
            long settled = System.nanoTime() + TimeUnit.SECONDS.toNanos(45);
            while (System.nanoTime() < settled) {
                if (locked(first, topic) == 4 && locked(second, topic) == 4) {
                    break;
                }
                Thread.sleep(20);
            }
            System.out.println("LOCKED first " + locked(first, topic) + ", second "
                + locked(second, topic));
        }
        sender.start();
        // Both consuming: the membership is settled.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while ((a.isEmpty() || b.isEmpty()) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        Thread.sleep(1000);
        int from = next.get();
        Thread.sleep(3000);
        int to = next.get();
        // The stable window delivered (bounded wait), then counted.
        int both = 0, none = 0, onlyA = 0, onlyB = 0;
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
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
        System.out.println("STABLE " + (to - from) + " messages: first only " + onlyA
            + ", second only " + onlyB + ", both " + both + ", neither " + none);
        boolean shared = to > from && both == 0 && none == 0 && onlyA > 0 && onlyB > 0;

        second.shutdown();
        long left = System.nanoTime();
        int after = next.get();
        // Everything sent since the second left reaches the first, soon: at least three rounds
        // of the producer's round robin over the 8 queues (so the second's queues too), less
        // the last round, which may still be on its way.
        long takeover = -1;
        deadline = left + TimeUnit.SECONDS.toNanos(8);
        while (System.nanoTime() < deadline) {
            int upTo = next.get() - 8;
            boolean all = upTo >= after + 24;
            for (int i = after; all && i < upTo; i++) {
                if (!a.contains(i)) all = false;
            }
            if (all) {
                takeover = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - left);
                break;
            }
            Thread.sleep(20);
        }
        sending.set(false);
        sender.join();
        System.out.println("TAKEN OVER IN " + takeover + " ms");
        first.shutdown();
        producer.shutdown();
        boolean ok = shared && takeover >= 0;
        System.out.println(ok ? "SHARED THEN TAKEN OVER" : "NOT SHARED OR NOT TAKEN OVER");
        System.exit(ok ? 0 : 1);
    }
}
