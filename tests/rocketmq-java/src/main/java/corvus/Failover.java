package corvus;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * An application that keeps sending and consuming while the test fails its broker group
 * over (kills the master, the slave takes over, the old master comes back as slave).
 *
 * Usage: Failover NAMESRV TOPIC GROUP. A DefaultMQProducer sends messages numbered 0, 1, …
 * one after another (synchronous sends, 5 ms apart, 100 ms after a failed one); a DefaultMQPushConsumer of GROUP
 * (CLUSTERING, CONSUME_FROM_FIRST_OFFSET) subscribes to TOPIC. It prints
 *
 *   ACK N MSGID STATUS   for each send that returned a SendResult (STATUS is its SendStatus)
 *   FAIL N EXCEPTION     for each send that threw, after the client's own retries
 *   RECV N               for each message the consumer got (duplicates print again)
 *
 * and reads stdin: the line "stop" stops the sends; the consumer then goes on until it has
 * every number acknowledged with SEND_OK (30 s at most), and the program prints
 * "SUMMARY acked=A send_ok=S failed=F received=R missing=M" and exits 0.
 *
 * Settings for a fast failover, all stock 4.9.8 ClientConfig / DefaultMQProducer options:
 * - pollNameServerInterval 1000 ms (default 30 s): how often the client asks the NameServer
 *   for the routes of the topics it uses; after a failover the route names the new master
 *   under broker id 0, and both the producer and the consumer learn it within a second.
 *   A failed send does not refresh the route in 4.9.8 (it asks the NameServer only when it
 *   has no route for the topic), so with the default 30 s every send fails until the next
 *   poll: sends resumed about 29 s after the kill, against about 3 s with 1000 ms.
 * - heartbeatBrokerInterval 1000 ms (default 30 s): the consumer heartbeats the new master
 *   soon, so it knows the group's subscription before the first pull.
 * - sendMsgTimeout 3000 ms, retryTimesWhenSendFailed 2 (three tries in all).
 * - sendLatencyFaultEnable stays off: it steers sends away from a broker *name* that failed,
 *   towards another name; a failover keeps the name (the group has one), so it cannot help.
 * The consumer keeps its defaults for pulls (a failed pull is retried after 3 s, by which
 * time the route has the new master's address).
 */
public class Failover {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];

        Set<Integer> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("failover-consumer");
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.setHeartbeatBrokerInterval(1000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                if (body.startsWith("f-")) {
                    int n = Integer.parseInt(body.substring(2));
                    received.add(n);
                    System.out.println("RECV " + n);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer("JavaFailoverProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("failover-producer");
        producer.setSendMsgTimeout(3000);
        producer.setRetryTimesWhenSendFailed(2);
        producer.setPollNameServerInterval(1000);
        producer.setHeartbeatBrokerInterval(1000);
        producer.start();

        Set<Integer> sendOk = ConcurrentHashMap.newKeySet();
        int[] counts = new int[2]; // acked, failed; written by the sender only
        AtomicBoolean sending = new AtomicBoolean(true);
        Thread sender = new Thread(() -> {
            for (int n = 0; sending.get(); n++) {
                long pauseMs = 5;
                try {
                    SendResult r = producer.send(
                            new Message(topic, ("f-" + n).getBytes(StandardCharsets.UTF_8)));
                    counts[0]++;
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        sendOk.add(n);
                    }
                    System.out.println("ACK " + n + " " + r.getMsgId() + " " + r.getSendStatus());
                } catch (Exception e) {
                    counts[1]++;
                    System.out.println("FAIL " + n + " " + e.toString().replace('\n', ' '));
                    pauseMs = 100;
                }
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        sender.start();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
            // Anything else is ignored; end of input also stops.
        }
        sending.set(false);
        sender.join();
        producer.shutdown();

        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        Set<Integer> missing = new TreeSet<>();
        while (System.nanoTime() < deadline) {
            missing.clear();
            for (int n : sendOk) {
                if (!received.contains(n)) {
                    missing.add(n);
                }
            }
            if (missing.isEmpty()) {
                break;
            }
            Thread.sleep(50);
        }
        consumer.shutdown();
        if (!missing.isEmpty()) {
            System.out.println("MISSING " + missing);
        }
        System.out.println("SUMMARY acked=" + counts[0] + " send_ok=" + sendOk.size()
                + " failed=" + counts[1] + " received=" + received.size()
                + " missing=" + missing.size());
        System.out.flush();
        System.exit(0);
    }
}
