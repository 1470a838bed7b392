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
 * With "orderly killed", the second member runs in a process of its own, which is killed
 * (SIGKILL) instead of shut down: it gives nothing back and says nothing, its connections
 * just close. The first must still take its queues over within seconds.
 *
 * Usage: Leave NAMESRV TOPIC GROUP [orderly [killed]]. Prints STABLE ..., TAKEN OVER IN ...
 * ms and SHARED THEN TAKEN OVER; exit 0.
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

    /**
     * The second member in a process of its own ("killed"): an orderly member that prints
     * GOT n for each message it consumes and LOCKED n whenever the count of queues it holds
     * the lock of changes. It runs until it is killed (at most two minutes).
     */
    static void member(String ns, String topic, String group) throws Exception {
        Set<Integer> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = orderly(ns, topic, group, "leave-b", new java.util.AbstractSet<Integer>() {
            @Override
            public boolean add(Integer i) {
                synchronized (System.out) {
                    System.out.println("GOT " + i);
                    System.out.flush();
                }
                return got.add(i);
            }

            @Override
            public java.util.Iterator<Integer> iterator() {
                return got.iterator();
            }

            @Override
            public int size() {
                return got.size();
            }
        });
        int shown = -1;
        long end = System.nanoTime() + TimeUnit.MINUTES.toNanos(2);
        while (System.nanoTime() < end) {
            int n = locked(c, topic);
            if (n != shown) {
                synchronized (System.out) {
                    System.out.println("LOCKED " + n);
                    System.out.flush();
                }
                shown = n;
            }
            Thread.sleep(20);
        }
        System.exit(0);
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("member")) {
            member(args[1], args[2], args[3]);
            return;
        }
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        boolean inOrder = args.length > 3 && args[3].equals("orderly");
        boolean killed = args.length > 4 && args[4].equals("killed");

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
        DefaultMQPushConsumer second = null;
        Process child = null;
        AtomicInteger childLocked = new AtomicInteger();
        if (killed) {
            child = new ProcessBuilder(
                    System.getProperty("java.home") + "/bin/java", "-cp",
                    System.getProperty("java.class.path"), "corvus.Leave", "member", ns, topic,
                    group)
                .redirectError(ProcessBuilder.Redirect.DISCARD)
                .start();
            java.io.BufferedReader out = new java.io.BufferedReader(
                new java.io.InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            Thread reader = new Thread(() -> {
                try {
                    String line;
                    while ((line = out.readLine()) != null) {
                        if (line.startsWith("GOT ")) {
                            b.add(Integer.parseInt(line.substring(4)));
                        } else if (line.startsWith("LOCKED ")) {
                            childLocked.set(Integer.parseInt(line.substring(7)));
                        }
                    }
                } catch (Exception e) {
                    // The member was killed: its output ends.
                }
            });
            reader.setDaemon(true);
            reader.start();
        } else {
            second = inOrder
                ? orderly(ns, topic, group, "leave-b", b)
                : Rebalance.member(ns, topic, group, "leave-b", b);
        }
        if (inOrder) {
            // A joining member's lock of a queue the other has not given up yet fails, and it
            // tries again at its next rebalance, up to 20 s later: the two settle on their
            // halves of the 8 queues, each holding the locks of its own, before messages flow.
            long settled = System.nanoTime() + TimeUnit.SECONDS.toNanos(45);
            while (System.nanoTime() < settled) {
                int other = killed ? childLocked.get() : locked(second, topic);
                if (locked(first, topic) == 4 && other == 4) {
                    break;
                }
                Thread.sleep(20);
            }
            System.out.println("LOCKED first " + locked(first, topic) + ", second "
                + (killed ? childLocked.get() : locked(second, topic)));
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

        if (killed) {
            // SIGKILL: no UNLOCK_BATCH_MQ, no UNREGISTER_CLIENT; its connections just close.
            child.destroyForcibly();
        } else {
            second.shutdown();
        }
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
