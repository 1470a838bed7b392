package corvus;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The clients a monitored cluster has, for rocketmq-exporter to observe: a producer in
 * producer group PRODUCER_GROUP sending RATE messages a second to TOPIC, and a push consumer
 * in GROUP that fails every FAIL_EVERY-th message each time it gets it, with
 * setMaxReconsumeTimes(1): a failed message is sent back (CONSUMER_SEND_MSG_BACK), comes
 * again from %RETRY%GROUP after the first retry delay (10 s), fails again and ends in
 * %DLQ%GROUP. A second push consumer, in GROUP + "Slow", takes a second per message with
 * one thread, so its backlog and the age of its next message grow. All stay connected
 * (heartbeats, GET_CONSUMER_RUNNING_INFO answered by the client) for SECONDS, then shut down.
 *
 * Usage: ExporterLoad NAMESRV TOPIC GROUP PRODUCER_GROUP SECONDS RATE FAIL_EVERY. Prints
 * READY once all are started, and at the end SENT n, CONSUMED ok, FAILED n, SLOW n; exit 0.
 */
public class ExporterLoad {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        String producerGroup = args[3];
        int seconds = Integer.parseInt(args[4]);
        int rate = Math.max(1, Integer.parseInt(args[5]));
        int failEvery = Math.max(1, Integer.parseInt(args[6]));

        AtomicLong ok = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("exporter-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(1);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                long n = Long.parseLong(body.substring(body.indexOf('-') + 1));
                if (n % failEvery == 0) {
                    failed.incrementAndGet();
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            ok.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        AtomicLong slowDone = new AtomicLong();
        DefaultMQPushConsumer slow = new DefaultMQPushConsumer(group + "Slow");
        slow.setNamesrvAddr(ns);
        slow.setInstanceName("exporter-slow-consumer");
        slow.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        slow.setConsumeThreadMin(1);
        slow.setConsumeThreadMax(1);
        slow.subscribe(topic, "*");
        slow.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            try {
                Thread.sleep(1000L * msgs.size());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            slowDone.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        slow.start();

        DefaultMQProducer producer = new DefaultMQProducer(producerGroup);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("exporter-producer");
        producer.start();
        System.out.println("READY");

        long sent = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        long pause = 1000L / rate;
        while (System.nanoTime() < deadline) {
            Message m = new Message(topic, "TagA", "k" + sent,
                ("m-" + sent).getBytes(StandardCharsets.UTF_8));
            try {
                producer.send(m);
                sent++;
            } catch (Exception e) {
                System.out.println("SEND FAILED " + e);
            }
            Thread.sleep(pause);
        }
        producer.shutdown();
        consumer.shutdown();
        slow.shutdown();
        System.out.println("SENT " + sent);
        System.out.println("CONSUMED " + ok.get());
        System.out.println("FAILED " + failed.get());
        System.out.println("SLOW " + slowDone.get());
        System.exit(0);
    }
}
