package corvus;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * An unchanged RocketMQ 4.9 application against corvus: a DefaultMQProducer sends single
 * messages and a batch, looks some of them up by their offset message id, and a
 * DefaultMQPushConsumer of a new group must then receive every one of them.
 *
 * Usage: Roundtrip NAMESRV TOPIC COUNT [GROUP]. Prints one line per step; after the sends and
 * the consumption it prints STEADY DONE and waits for a line on stdin before the lookups.
 * Exits 0 only when every message sent was received and every lookup found its message.
 */
public class Roundtrip {
    /**
     * The lookup by offset message id (VIEW_MESSAGE_BY_ID): 4.x's viewMessage(msgId); 5.x has
     * only viewMessage(topic, msgId), which decodes an offset id and asks the same.
     */
    static MessageExt view(DefaultMQProducer p, String topic, String id) throws Exception {
        try {
            return (MessageExt) DefaultMQProducer.class.getMethod("viewMessage", String.class)
                .invoke(p, id);
        } catch (NoSuchMethodException e) {
            return (MessageExt) DefaultMQProducer.class
                .getMethod("viewMessage", String.class, String.class).invoke(p, topic, id);
        } catch (java.lang.reflect.InvocationTargetException e) {
            throw (Exception) e.getCause();
        }
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args.length > 3 ? args[3] : "JavaRoundtripGroup";

        DefaultMQProducer producer = new DefaultMQProducer("JavaRoundtripProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("roundtrip-producer");
        producer.start();

        Set<String> sent = ConcurrentHashMap.newKeySet();
        List<String> offsetIds = new ArrayList<>();
        Set<Integer> queues = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < count; i++) {
            String body = "single-" + i;
            Message m = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", "key-" + i,
                body.getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                System.out.println("SEND FAILED " + r);
                System.exit(2);
            }
            sent.add(body);
            offsetIds.add(r.getOffsetMsgId());
            queues.add(r.getMessageQueue().getQueueId());
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            String body = "batch-" + i;
            batch.add(new Message(topic, "TagC", body.getBytes(StandardCharsets.UTF_8)));
            sent.add(body);
        }
        SendResult br = producer.send(batch);
        System.out.println("SENT " + sent.size() + " to " + queues.size() + " queues, batch "
            + br.getSendStatus());
        // One offset message id, for whoever drives this to look up (mqadmin queryMsgById).
        System.out.println("OFFSET MSG ID " + offsetIds.get(0) + " key-0");

        Set<String> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("roundtrip-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
        while (!received.containsAll(sent) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        Set<String> missing = new java.util.TreeSet<>(sent);
        missing.removeAll(received);
        System.out.println("RECEIVED " + received.size() + " of " + sent.size()
            + (missing.isEmpty() ? "" : " missing " + missing));
        // The steady state is over: whoever drives this may look at the broker now, and
        // says when to go on with one line on stdin.
        System.out.println("STEADY DONE");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        int found = 0;
        for (int i = 0; i < offsetIds.size(); i += Math.max(1, offsetIds.size() / 5)) {
            MessageExt m = view(producer, topic, offsetIds.get(i));
            String body = new String(m.getBody(), StandardCharsets.UTF_8);
            if (!body.equals("single-" + i)) {
                System.out.println("VIEW " + offsetIds.get(i) + " gave " + body);
                System.exit(3);
            }
            found++;
        }
        System.out.println("VIEWED " + found);
        consumer.shutdown();
        producer.shutdown();
        if (missing.isEmpty()) {
            System.out.println("ALL RECEIVED");
            System.exit(0);
        }
        System.exit(1);
    }
}
