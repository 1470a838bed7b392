package corvus;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ 5's server-side rebalance with the remoting client: two push consumers of one
 * group with {@code setClientRebalance(false)} ask the broker for their queues
 * (QUERY_ASSIGNMENT) and, the group's mode for the topic being POP (set beforehand with
 * mqadmin's setConsumeMode), pop them (POP_MESSAGE, ACK_MESSAGE) instead of pulling. A
 * producer sends COUNT messages; the first delivery of {@code m-0} is answered
 * RECONSUME_LATER, which in POP mode makes the client change its invisible time
 * (CHANGE_MESSAGE_INVISIBLETIME, 10 s): it comes back once with reconsume times 1. Every
 * other message is delivered once, to one of the two.
 *
 * <p>Usage: {@code PopMode NAMESRV TOPIC GROUP COUNT}. Prints the queues each consumer pops
 * ({@code POPPING name broker:queue}, queue -1 meaning any queue of that broker) and those
 * it pulls ({@code PULLING ...}, none expected), what it received, and ends with
 * {@code POP MODE OK} and exit 0, else exits non-zero.
 */
public class PopMode {
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
        int count = Integer.parseInt(args[3]);

        // body -> deliveries, and the reconsume times of each delivery of m-0.
        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        List<Integer> retriedTimes = java.util.Collections.synchronizedList(new ArrayList<>());
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (String name : new String[] {"pop-a", "pop-b"}) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
            c.setNamesrvAddr(ns);
            c.setInstanceName(name);
            c.setClientRebalance(false);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (body.equals("m-0")) {
                        retriedTimes.add(m.getReconsumeTimes());
                        if (m.getReconsumeTimes() == 0) {
                            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                        }
                    }
                    deliveries.computeIfAbsent(body, k -> new AtomicInteger()).incrementAndGet();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            consumers.add(c);
        }

        // Both consumers have asked the broker for their queues before anything is sent.
        long deadline = System.currentTimeMillis() + 30_000;
        for (DefaultMQPushConsumer c : consumers) {
            while (c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getPopProcessQueueTable().keySet()
                .stream().noneMatch(q -> q.getTopic().equals(topic))) {
                check(System.currentTimeMillis() < deadline, "no queue was assigned for POP within 30 s");
                TimeUnit.MILLISECONDS.sleep(50);
            }
        }

        DefaultMQProducer producer = new DefaultMQProducer(group + "Producer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("pop-producer");
        producer.setSendMsgTimeout(10000);
        producer.start();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "TagA", ("m-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            check(r.getSendStatus() == SendStatus.SEND_OK, "send " + i + ": " + r);
        }
        producer.shutdown();
        System.out.println("SENT " + count);

        deadline = System.currentTimeMillis() + 60_000;
        while (deliveries.size() < count) {
            check(System.currentTimeMillis() < deadline,
                "received " + deliveries.size() + " of " + count + " within 60 s: " + deliveries.keySet());
            TimeUnit.MILLISECONDS.sleep(50);
        }
        // Anything delivered twice would arrive within a few more pops.
        TimeUnit.MILLISECONDS.sleep(500);

        for (DefaultMQPushConsumer c : consumers) {
            TreeSet<String> popping = new TreeSet<>();
            for (MessageQueue q : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getPopProcessQueueTable().keySet()) {
                if (q.getTopic().equals(topic)) {
                    popping.add(q.getBrokerName() + ":" + q.getQueueId());
                }
            }
            TreeSet<String> pulling = new TreeSet<>();
            for (MessageQueue q : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                if (q.getTopic().equals(topic)) {
                    pulling.add(q.getBrokerName() + ":" + q.getQueueId());
                }
            }
            System.out.println("POPPING " + c.getInstanceName() + " " + String.join(" ", popping));
            System.out.println("PULLING " + c.getInstanceName() + " " + String.join(" ", pulling));
            check(pulling.isEmpty(), "no queue of the topic is pulled: " + pulling);
        }
        int twice = 0;
        for (Map.Entry<String, AtomicInteger> e : deliveries.entrySet()) {
            if (e.getValue().get() != 1) {
                System.out.println("DUPLICATE " + e.getKey() + " " + e.getValue().get());
                twice++;
            }
        }
        System.out.println("RECEIVED " + deliveries.size() + " once each: " + (twice == 0));
        System.out.println("M-0 DELIVERIES " + retriedTimes);
        check(twice == 0, "every message delivered once");
        check(retriedTimes.equals(List.of(0, 1)), "m-0 came back once, with reconsume times 1: " + retriedTimes);
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        System.out.println("POP MODE OK");
        System.exit(0);
    }
}
