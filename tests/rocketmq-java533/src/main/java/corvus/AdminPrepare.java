package corvus;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Prepares a broker the same way for a side-by-side run of RocketMQ's mqadmin
 * (tests/rocketmq-tools5/compare.sh): 100 messages with keys ({@code key-<i>}) and tags
 * (TagA, TagB) sent to the topic's queues in turn; an offline group {@code OfflineGroup}
 * whose committed offset is 5 on every queue (a backlog of 60 on a topic of 8 queues); an
 * online push group {@code OnlineGroup} that consumes everything and stays connected until
 * stdin closes.
 *
 * <p>Usage: {@code AdminPrepare NAMESRV TOPIC}. Prints {@code OFFSET MSG ID <id>} and
 * {@code UNIQ MSG ID <id>} of the first message, then {@code READY} once the online group
 * consumed all 100.
 */
public class AdminPrepare {
    public static void main(String[] args) {
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

        DefaultMQProducer producer = new DefaultMQProducer("AdminProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("admin-producer");
        producer.setSendMsgTimeout(10000);
        producer.start();
        List<MessageQueue> mqs = producer.fetchPublishMessageQueues(topic);
        for (int i = 0; i < 100; i++) {
            Message m = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", "key-" + i,
                ("body-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m, mqs.get(i % mqs.size()));
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + i + ": " + r);
            }
            if (i == 0) {
                System.out.println("OFFSET MSG ID " + r.getOffsetMsgId());
                System.out.println("UNIQ MSG ID " + r.getMsgId());
            }
        }

        DefaultMQPullConsumer offline = new DefaultMQPullConsumer("OfflineGroup");
        offline.setNamesrvAddr(ns);
        offline.setInstanceName("admin-offline");
        offline.start();
        Set<MessageQueue> all = offline.fetchSubscribeMessageQueues(topic);
        for (MessageQueue mq : all) {
            offline.updateConsumeOffset(mq, 5);
        }
        offline.getOffsetStore().persistAll(all);
        offline.shutdown();

        Set<String> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer online = new DefaultMQPushConsumer("OnlineGroup");
        online.setNamesrvAddr(ns);
        online.setInstanceName("admin-online");
        online.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        online.subscribe(topic, "*");
        online.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        online.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (received.size() < 100 && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        if (received.size() < 100) {
            throw new IllegalStateException("the online group got " + received.size() + " of 100");
        }
        // Its offsets reach the broker at the next persist (every 5 s).
        online.getDefaultMQPushConsumerImpl().persistConsumerOffset();
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        while (in.readLine() != null) {
            // Holds the group online until stdin closes.
        }
        online.shutdown();
        producer.shutdown();
        System.exit(0);
    }
}
