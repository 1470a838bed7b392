package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * Two push consumers of one group in BROADCASTING: each must receive every message (their
 * offsets are their own, kept in a fresh local directory).
 *
 * Usage: Broadcast NAMESRV TOPIC COUNT GROUP. Prints EACH GOT ... and BOTH GOT ALL; exit 0.
 */
public class Broadcast {
    static DefaultMQPushConsumer member(String ns, String topic, String group, String name,
            Set<String> got) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(name);
        c.setMessageModel(MessageModel.BROADCASTING);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];
        System.setProperty("rocketmq.client.localOffsetStoreDir",
            java.nio.file.Files.createTempDirectory("corvus-broadcast").toString());

        Set<String> a = ConcurrentHashMap.newKeySet();
        Set<String> b = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer first = member(ns, topic, group, "broadcast-a", a);
        DefaultMQPushConsumer second = member(ns, topic, group, "broadcast-b", b);

        DefaultMQProducer producer = new DefaultMQProducer("JavaBroadcastProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("broadcast-producer");
        producer.start();
        Set<String> sent = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < count; i++) {
            String body = "bc-" + i;
            producer.send(new Message(topic, body.getBytes(StandardCharsets.UTF_8)));
            sent.add(body);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
        while (!(a.containsAll(sent) && b.containsAll(sent)) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        System.out.println("EACH GOT first " + a.size() + ", second " + b.size() + " of " + sent.size());
        second.shutdown();
        first.shutdown();
        producer.shutdown();
        boolean ok = a.containsAll(sent) && b.containsAll(sent);
        System.out.println(ok ? "BOTH GOT ALL" : "NOT BROADCAST");
        System.exit(ok ? 0 : 1);
    }
}
