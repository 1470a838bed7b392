package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

/**
 * Two push consumers of one group share the topic's queues while messages flow: while the
 * membership is stable every message is received by exactly one of them. Then the second
 * leaves (shutdown: UNREGISTER_CLIENT); the first must take its queues over within a few
 * seconds, not at its next periodic rebalance 20 s later.
 *
 * Usage: Leave NAMESRV TOPIC GROUP. Prints STABLE ..., TAKEN OVER IN ... ms and
 * SHARED THEN TAKEN OVER; exit 0.
 */
public class Leave {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];

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
        DefaultMQPushConsumer first = Rebalance.member(ns, topic, group, "leave-a", a);
        DefaultMQPushConsumer second = Rebalance.member(ns, topic, group, "leave-b", b);
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
