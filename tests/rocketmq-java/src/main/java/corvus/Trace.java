package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Message trace as an application turns it on (enableMsgTrace): a traced producer writes a
 * Pub record of each send to the trace topic, a traced push consumer a SubBefore and a
 * SubAfter record of each consume. Built for both clients (tests/rocketmq-java5 includes it):
 * the 5.x client's trace dispatcher writes only records that name a region, which a
 * consumer's records take from the message's MSG_REGION property.
 *
 * Usage: Trace NAMESRV TOPIC COUNT GROUP. Prints TRACED and the msg id of each message sent,
 * CONSUMED n of COUNT and TRACES STORED, and exits 0 once the consumer got every one and the
 * trace topic holds the Pub and the SubAfter record of each.
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
        // The trace dispatchers batch their records (the 5.x client for up to 5 s) and send
        // them asynchronously, and a shutdown does not wait for them: stay up until the trace
        // topic holds a Pub and a SubAfter record of every message.
        boolean traced = awaitTraces(ns, group, sent);
        System.out.println(traced ? "TRACES STORED" : "TRACES MISSING");
        consumer.shutdown();
        producer.shutdown();
        System.exit(got == count && traced ? 0 : 1);
    }

    /** Reads the trace topic from its start until every id has a Pub and a SubAfter record. */
    static boolean awaitTraces(String ns, String group, Set<String> ids) throws Exception {
        DefaultLitePullConsumer watch = new DefaultLitePullConsumer(group + "TraceWatch");
        watch.setNamesrvAddr(ns);
        watch.setInstanceName("trace-watch");
        watch.setAutoCommit(false);
        watch.start();
        Collection<MessageQueue> queues = watch.fetchMessageQueues("RMQ_SYS_TRACE_TOPIC");
        watch.assign(queues);
        for (MessageQueue q : queues) {
            watch.seekToBegin(q);
        }
        Set<String> published = new HashSet<>();
        Set<String> consumedAfter = new HashSet<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!(published.containsAll(ids) && consumedAfter.containsAll(ids))
                && System.nanoTime() < deadline) {
            for (MessageExt m : watch.poll(1000)) {
                // Records are separated by U+0002, their fields by U+0001; the first field
                // names the kind of record.
                for (String record : new String(m.getBody(), StandardCharsets.UTF_8).split("\u0002")) {
                    String[] fields = record.split("\u0001");
                    Set<String> into = fields[0].equals("Pub") ? published
                        : fields[0].equals("SubAfter") ? consumedAfter : null;
                    if (into == null) {
                        continue;
                    }
                    for (String f : fields) {
                        if (ids.contains(f)) {
                            into.add(f);
                        }
                    }
                }
            }
        }
        watch.shutdown();
        return published.containsAll(ids) && consumedAfter.containsAll(ids);
    }
}
