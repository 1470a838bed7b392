package corvus;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The checking consumer of corvus-bodycheck as a RocketMQ 4.9 application: pulls every
 * queue of TOPIC from offset 0 for DURATION_MS, then to its end, and checks every body it is
 * served against what it says it is (its length and a hash of the rest, BodyCheckLoad's
 * format). Prints BAD BODY lines and JAVA CHECK DONE served N bad B; exits 1 on a bad body.
 *
 * Usage: BodyCheckConsume NAMESRV TOPIC DURATION_MS
 */
public class BodyCheckConsume {
    static String check(byte[] b) {
        if (b == null || b.length < BodyCheckLoad.HEADER) {
            return "shorter than the header: " + (b == null ? "null" : b.length);
        }
        int magic = (b[0] & 0xff) | (b[1] & 0xff) << 8 | (b[2] & 0xff) << 16 | (b[3] & 0xff) << 24;
        if (magic != BodyCheckLoad.MAGIC) {
            return "no magic";
        }
        int len = (b[4] & 0xff) | (b[5] & 0xff) << 8 | (b[6] & 0xff) << 16 | (b[7] & 0xff) << 24;
        if (len != b.length) {
            return "says " + len + " bytes, has " + b.length;
        }
        long h = 0;
        for (int i = 0; i < 8; i++) {
            h |= (b[20 + i] & 0xffL) << (8 * i);
        }
        if (BodyCheckLoad.fnv(b, BodyCheckLoad.HEADER) != h) {
            return "hash differs";
        }
        return null;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        long durationMs = Long.parseLong(args[2]);
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("BodyCheckJavaConsumer");
        c.setNamesrvAddr(ns);
        c.setInstanceName("bodycheck-consumer");
        c.start();
        Set<MessageQueue> queues = c.fetchSubscribeMessageQueues(topic);
        Map<MessageQueue, Long> next = new HashMap<>();
        for (MessageQueue q : queues) {
            next.put(q, 0L);
        }
        long served = 0;
        long bad = 0;
        long end = System.currentTimeMillis() + durationMs;
        long drainEnd = end + 120_000;
        while (true) {
            boolean moved = false;
            for (MessageQueue q : queues) {
                PullResult r;
                try {
                    r = c.pull(q, "*", next.get(q), 64, 3000);
                } catch (Exception e) {
                    System.out.println("pull " + q.getQueueId() + ": " + e);
                    continue;
                }
                if (r.getPullStatus() == PullStatus.FOUND) {
                    for (MessageExt m : r.getMsgFoundList()) {
                        served++;
                        String why = check(m.getBody());
                        if (why != null) {
                            bad++;
                            System.out.println("BAD BODY queue " + m.getQueueId() + " offset "
                                + m.getQueueOffset() + " commit-log " + m.getCommitLogOffset()
                                + " store_size " + m.getStoreSize() + " sys_flag " + m.getSysFlag()
                                + " body " + (m.getBody() == null ? -1 : m.getBody().length) + ": " + why);
                        }
                    }
                }
                if (r.getNextBeginOffset() != next.get(q)) {
                    moved = true;
                }
                next.put(q, r.getNextBeginOffset());
            }
            long now = System.currentTimeMillis();
            if (now > end && !moved) {
                boolean atEnd = true;
                for (MessageQueue q : queues) {
                    if (c.maxOffset(q) > next.get(q)) {
                        atEnd = false;
                    }
                }
                if (atEnd || now > drainEnd) {
                    break;
                }
            }
            if (!moved) {
                Thread.sleep(20);
            }
        }
        System.out.println("JAVA CHECK DONE served " + served + " bad " + bad + " next " + next.values());
        c.shutdown();
        System.exit(bad > 0 ? 1 : 0);
    }
}
