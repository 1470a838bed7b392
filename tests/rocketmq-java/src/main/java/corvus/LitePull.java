package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A DefaultLitePullConsumer polls until it has every message sent: subscribed to the topic
 * (the default), or assigned every queue of it and sought to their beginning (MODE assign).
 * The 5.x client pulls with LITE_PULL_MESSAGE (361), the 4.9 client with PULL_MESSAGE.
 *
 * Usage: LitePull NAMESRV TOPIC COUNT GROUP [subscribe|assign]. Prints POLLED ... and
 * ALL POLLED; exit 0.
 */
public class LitePull {
    public static void main(String[] args) {
        // The clients' threads keep the JVM alive after main throws: end it at once, so a
        // failure is reported now and not when the test's own bound runs out.
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(3);
        }
    }

    static void run(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];
        boolean assign = args.length > 4 && args[4].equals("assign");

        DefaultMQProducer producer = new DefaultMQProducer("JavaLitePullProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("litepull-producer");
        // A probe of delivery, not of latency: on a loaded host a send may take seconds.
        producer.setSendMsgTimeout(10000);
        producer.start();
        Set<String> sent = new HashSet<>();
        for (int i = 0; i < count; i++) {
            String body = "lite-" + i;
            producer.send(new Message(topic, body.getBytes(StandardCharsets.UTF_8)));
            sent.add(body);
        }

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("litepull-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (assign) {
            consumer.setAutoCommit(false);
            consumer.start();
            Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
            consumer.assign(queues);
            for (MessageQueue q : queues) consumer.seekToBegin(q);
            System.out.println("ASSIGNED " + queues.size() + " queues");
        } else {
            consumer.subscribe(topic, "*");
            consumer.start();
        }
        Set<String> received = new HashSet<>();
        int polls = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
        while (!received.containsAll(sent) && System.nanoTime() < deadline) {
            List<MessageExt> msgs = consumer.poll(1000);
            polls++;
            for (MessageExt m : msgs) received.add(new String(m.getBody(), StandardCharsets.UTF_8));
        }
        System.out.println("POLLED " + received.size() + " of " + sent.size() + " in " + polls + " polls");
        consumer.shutdown();
        producer.shutdown();
        boolean ok = received.containsAll(sent);
        System.out.println(ok ? "ALL POLLED" : "NOT ALL POLLED");
        System.exit(ok ? 0 : 1);
    }
}
