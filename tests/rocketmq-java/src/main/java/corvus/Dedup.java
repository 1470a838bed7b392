package corvus;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Sends that time out, retried by the application with the same Message objects: the
 * client keeps each message's UNIQ_KEY (MessageClientIDSetter sets it only when absent),
 * and its own retries stop once the send's timeout is spent, so the retry here is the
 * application's.
 *
 * 1. One send, so the route and connections are there (WARM).
 * 2. The broker is paused (kill -STOP PID); COUNT sends, each on its own thread with a
 *    SEND_TIMEOUT_MS timeout, are written to it and time out (TIMEOUT i).
 * 3. The broker resumes (kill -CONT PID) with those sends queued, and the same Message
 *    objects are sent again at once (RETRIED body queueId queueOffset offsetMsgId uniqKey).
 * 4. Every queue of the topic is read from its start until EXPECT copies of the bodies are
 *    there or 20 s have passed (STORED body queueId queueOffset offsetMsgId uniqKey).
 *
 * With MODE failover (BROKER_PID unused), step 2 and 3 are instead: COUNT sends answered
 * (SENT body queueId queueOffset offsetMsgId uniqKey, then ALL SENT); the program waits for
 * a line on stdin (the test kills the master meanwhile, and the slave takes over) and sends
 * the same Message objects again, each until it is answered (RETRIED ...).
 *
 * Usage: Dedup NAMESRV TOPIC BROKER_PID COUNT EXPECT [failover]. Prints DONE; exit 0.
 */
public class Dedup {
    static final long SEND_TIMEOUT_MS = 2000;

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(3);
        }
        System.exit(0);
    }

    static void signal(String sig, String pid) throws Exception {
        int code = new ProcessBuilder("kill", "-" + sig, pid).inheritIO().start().waitFor();
        if (code != 0) {
            throw new IllegalStateException("kill -" + sig + " " + pid + " exited " + code);
        }
    }

    /** The offset message id the client worked out from the record's store host and offset. */
    static String offsetMsgId(MessageExt m) {
        return m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId();
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    /** Steps 2 and 3's pause: the sends time out while the broker is stopped. */
    static void pause(DefaultMQProducer producer, List<Message> messages, String pid) throws Exception {
        int count = messages.size();
        signal("STOP", pid);
        CountDownLatch timedOut = new CountDownLatch(count);
        try {
            for (int i = 0; i < count; i++) {
                final int n = i;
                new Thread(() -> {
                    try {
                        SendResult r = producer.send(messages.get(n), SEND_TIMEOUT_MS);
                        System.out.println("ANSWERED WHILE PAUSED " + n + " " + r);
                    } catch (Exception e) {
                        System.out.println("TIMEOUT " + n + " " + e.getClass().getSimpleName());
                    } finally {
                        timedOut.countDown();
                    }
                }).start();
            }
            timedOut.await();
        } finally {
            signal("CONT", pid);
        }
    }

    static String line(String what, int i, SendResult r) {
        return what + " dedup-" + i + " " + r.getMessageQueue().getQueueId() + " "
            + r.getQueueOffset() + " " + r.getOffsetMsgId() + " " + r.getMsgId();
    }

    static void run(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String pid = args[2];
        int count = Integer.parseInt(args[3]);
        int expect = Integer.parseInt(args[4]);
        boolean failover = args.length > 5 && args[5].equals("failover");

        DefaultMQProducer producer = new DefaultMQProducer("JavaDedupProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("dedup-producer");
        producer.setSendMsgTimeout(10000);
        // A new master is found within a second of its registration.
        producer.setPollNameServerInterval(1000);
        producer.start();
        producer.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
        System.out.println("WARM");

        List<Message> messages = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            messages.add(new Message(topic, ("dedup-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        if (failover) {
            for (int i = 0; i < count; i++) {
                System.out.println(line("SENT", i, producer.send(messages.get(i))));
            }
            System.out.println("ALL SENT");
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        } else {
            pause(producer, messages, pid);
        }

        for (int i = 0; i < count; i++) {
            Message m = messages.get(i);
            SendResult r = null;
            // Until the new master is in the route: bounded to a minute.
            for (int attempt = 0; r == null; attempt++) {
                try {
                    r = producer.send(m);
                } catch (Exception e) {
                    if (attempt >= 120) {
                        throw e;
                    }
                    System.out.println("RETRY FAILED " + i + " " + e.getClass().getSimpleName());
                    Thread.sleep(500);
                }
            }
            System.out.println(line("RETRIED", i, r));
        }
        producer.shutdown();

        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("JavaDedupReader");
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("dedup-reader");
        consumer.start();
        List<String> stored = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20000;
        while (true) {
            stored.clear();
            for (MessageQueue mq : consumer.fetchSubscribeMessageQueues(topic)) {
                long offset = 0;
                for (int pulls = 0; pulls < 1000; pulls++) {
                    PullResult p = consumer.pull(mq, "*", offset, 32);
                    if (p.getPullStatus() != PullStatus.FOUND) {
                        break;
                    }
                    for (MessageExt m : p.getMsgFoundList()) {
                        if (body(m).startsWith("dedup-")) {
                            stored.add("STORED " + body(m) + " " + mq.getQueueId() + " "
                                + m.getQueueOffset() + " " + offsetMsgId(m) + " "
                                + m.getProperty("UNIQ_KEY"));
                        }
                    }
                    offset = p.getNextBeginOffset();
                }
            }
            if (stored.size() >= expect || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(200);
        }
        for (String s : stored) {
            System.out.println(s);
        }
        consumer.shutdown();
        System.out.println("DONE");
    }
}
