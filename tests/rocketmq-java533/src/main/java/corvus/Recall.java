package corvus;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ 5.3.2's recall with the remoting client: two messages due 3 s ahead are sent to
 * one queue (setDeliverTimeMs), each SendResult with a recall handle; the first is recalled
 * (DefaultMQProducer.recallMessage, RECALL_MESSAGE), which answers its message id; a
 * consumer of the queue gets the second and not the first (due at the same time and stored
 * first, it would come before the second); recalling the delivered second, and a handle
 * naming a message never sent, are refused with the broker's code.
 *
 * <p>Usage: {@code Recall NAMESRV TOPIC GROUP}. Prints what happened, ends with
 * {@code RECALL OK} and exit 0, else exits non-zero.
 */
public class Recall {
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(3);
        }
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static void run(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];

        DefaultMQProducer producer = new DefaultMQProducer(group + "Producer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("recall-producer");
        producer.setSendMsgTimeout(10000);
        producer.start();
        MessageQueue mq = producer.fetchPublishMessageQueues(topic).get(0);
        long due = System.currentTimeMillis() + 3000;
        List<SendResult> sent = new ArrayList<>();
        for (String body : new String[] {"recall-1", "recall-2"}) {
            Message m = new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8));
            m.setDeliverTimeMs(due);
            SendResult r = producer.send(m, mq);
            check(r.getRecallHandle() != null && !r.getRecallHandle().isEmpty(), "a recall handle for " + body);
            sent.add(r);
        }
        System.out.println("SENT 2 to " + mq.getBrokerName() + " with recall handles");

        String id = producer.recallMessage(topic, sent.get(0).getRecallHandle());
        check(id.equals(sent.get(0).getMsgId()), "the recall answers the message id: " + id);
        System.out.println("RECALLED recall-1");

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("recall-consumer");
        consumer.setAutoCommit(false);
        consumer.start();
        consumer.assign(Collections.singletonList(mq));
        consumer.seekToBegin(mq);
        List<String> got = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
        while (!got.contains("recall-2") && System.nanoTime() < deadline) {
            for (MessageExt m : consumer.poll(1000)) {
                got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
        }
        consumer.shutdown();
        check(got.equals(Collections.singletonList("recall-2")), "only recall-2 was delivered: " + got);
        System.out.println("DELIVERED recall-2 only");

        try {
            producer.recallMessage(topic, sent.get(1).getRecallHandle());
            check(false, "a recall of a delivered message succeeded");
        } catch (MQBrokerException e) {
            System.out.println("DELIVERED REFUSED " + e.getResponseCode() + ": " + e.getErrorMessage());
        }
        // The first handle, naming a message id never sent, and a time still ahead.
        String text = new String(java.util.Base64.getUrlDecoder().decode(sent.get(0).getRecallHandle()),
                StandardCharsets.UTF_8);
        String[] parts = text.split(" ");
        long ahead = System.currentTimeMillis() + 60000;
        String forged = java.util.Base64.getUrlEncoder().encodeToString(
                (parts[0] + " " + parts[1] + " " + parts[2] + " " + ahead + " 0A0B0C0D0E0F").getBytes(StandardCharsets.UTF_8));
        try {
            producer.recallMessage(topic, forged);
            check(false, "a recall of a message never sent succeeded");
        } catch (MQBrokerException e) {
            System.out.println("UNKNOWN REFUSED " + e.getResponseCode() + ": " + e.getErrorMessage());
        }
        producer.shutdown();
        System.out.println("RECALL OK");
        System.exit(0);
    }
}
