package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Message trace as an application turns it on (enableMsgTrace): a traced producer writes a
 * Pub record of each send to the trace topic, a traced push consumer a SubBefore and a
 * SubAfter record of each consume. Built for both clients (tests/rocketmq-java5 includes it):
 * the 5.x client's trace dispatcher writes only records that name a region, which a
 * consumer's records take from the message's MSG_REGION property.
 *
 * Usage: Trace NAMESRV TOPIC COUNT GROUP. Prints TRACED and the msg id of each message sent,
 * CONSUMED n of COUNT, and exits 0 once the consumer got every one and both clients had time
 * to send their trace records and shut down.
 */
public class Trace {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];

        Set<String> consumed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, true, null);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("trace-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                consumed.add(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer("JavaTraceProducer", true, null);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("trace-producer");
        producer.start();
        Set<String> sent = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < count; i++) {
            SendResult r = producer.send(new Message(topic, "TagT", "trace-key-" + i,
                ("traced-" + i).getBytes(StandardCharsets.UTF_8)));
            sent.add(r.getMsgId());
            System.out.println("TRACED " + r.getMsgId());
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!consumed.containsAll(sent) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        int got = 0;
        for (String id : sent) {
            if (consumed.contains(id)) {
                got++;
            }
        }
        System.out.println("CONSUMED " + got + " of " + count);
        // The trace dispatchers batch their records for up to 5 s (the 5.x client's flush
        // interval) and send them asynchronously; a shutdown does not wait for sends in
        // flight. Give the last batch its interval before shutting down.
        Thread.sleep(6000);
        consumer.shutdown();
        producer.shutdown();
        System.exit(got == count ? 0 : 1);
    }
}
