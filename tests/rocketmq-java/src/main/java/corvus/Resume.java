package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A group's progress across a broker restart, in steps the test runs one after another:
 *
 *   Resume NAMESRV TOPIC GROUP produce N   sends N messages
 *   Resume NAMESRV TOPIC GROUP consume K   a push consumer of GROUP (from the first offset)
 *                                          consumes at least K messages, then shuts down
 *                                          (which commits its offsets to the broker)
 *   Resume NAMESRV TOPIC GROUP committed   prints the broker's committed offset of GROUP for
 *                                          each queue (QUERY_CONSUMER_OFFSET)
 *   Resume NAMESRV TOPIC GROUP rest N      a new push consumer of GROUP consumes until it
 *                                          has N distinct messages (bounded), then 1 s more
 *
 * Queues print as BROKER/QUEUE_ID; messages as GOT BROKER/QUEUE_ID OFFSET.
 */
public class Resume {
    static String queue(String broker, int id) {
        return broker + "/" + id;
    }

    static Set<String> consume(String ns, String topic, String group, int atLeast, int seconds,
            long extraMs) throws Exception {
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName("resume-consumer");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(4);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add("GOT " + queue(m.getBrokerName(), m.getQueueId()) + " " + m.getQueueOffset());
            }
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (got.size() < atLeast && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        Thread.sleep(extraMs);
        c.shutdown();
        return new TreeSet<>(got);
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        String step = args[3];
        switch (step) {
            case "produce": {
                int n = Integer.parseInt(args[4]);
                DefaultMQProducer p = new DefaultMQProducer("JavaResumeProducer");
                p.setNamesrvAddr(ns);
                p.setInstanceName("resume-producer");
                p.start();
                for (int i = 0; i < n; i++) {
                    p.send(new Message(topic, ("r-" + i).getBytes(StandardCharsets.UTF_8)));
                }
                p.shutdown();
                System.out.println("SENT " + n);
                break;
            }
            case "consume": {
                Set<String> got = consume(ns, topic, group, Integer.parseInt(args[4]), 30, 0);
                got.forEach(System.out::println);
                System.out.println("CONSUMED " + got.size());
                break;
            }
            case "committed": {
                DefaultMQPullConsumer c = new DefaultMQPullConsumer(group);
                c.setNamesrvAddr(ns);
                c.setInstanceName("resume-offsets");
                c.start();
                Map<String, Long> committed = new TreeMap<>();
                for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
                    committed.put(queue(mq.getBrokerName(), mq.getQueueId()), c.fetchConsumeOffset(mq, true));
                }
                c.shutdown();
                committed.forEach((q, o) -> System.out.println("COMMITTED " + q + " " + o));
                break;
            }
            case "rest": {
                int n = Integer.parseInt(args[4]);
                Set<String> got = consume(ns, topic, group, n, 40, 1000);
                got.forEach(System.out::println);
                System.out.println("RECEIVED " + got.size());
                break;
            }
            default:
                System.out.println("unknown step " + step);
                System.exit(2);
        }
        System.exit(0);
    }
}
