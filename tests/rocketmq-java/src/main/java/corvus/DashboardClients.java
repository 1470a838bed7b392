package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The online clients a dashboard page shows: a traced producer that sends COUNT messages
 * with keys (dash-key-i) and tags (TagA, TagB alternately) and stays connected, and a traced
 * push consumer of GROUP that reads them and stays connected, so the dashboard has producer
 * and consumer connections, a running consumer, consume-directly and message traces.
 *
 * Before the producer sends message OFFLINE_READ (40), a push consumer of OFFLINE_GROUP reads
 * the ones before it and shuts down: a group with a backlog and no connection.
 *
 * Usage: DashboardClients NAMESRV TOPIC COUNT PRODUCER_GROUP GROUP OFFLINE_GROUP
 * [ACCESS_KEY SECRET_KEY]; with the keys every client (and its trace dispatcher) signs its
 * requests with them (AclClientRPCHook: a broker with ACL on, 1.0 or 2.0). Prints
 * "OFFLINE READ n", "SENT msgId key" for each message, then "CONSUMED n of COUNT" once the
 * consumer has them all (or after 60 s), then "READY"; it runs until its standard input
 * closes or it is killed.
 */
public class DashboardClients {
    private static final int OFFLINE_READ = 40;

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String producerGroup = args[3];
        String group = args[4];
        String offlineGroup = args[5];
        RPCHook hook = args.length >= 8
            ? new AclClientRPCHook(new SessionCredentials(args[6], args[7])) : null;

        // OFFLINE_GROUP reads the first OFFLINE_READ messages and leaves (its offsets
        // committed at its shutdown): a group with a backlog and no connection.
        Set<String> offlineGot = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer offline = new DefaultMQPushConsumer(offlineGroup, hook,
            new AllocateMessageQueueAveragely());
        offline.setNamesrvAddr(ns);
        offline.setInstanceName("dashboard-offline");
        offline.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        offline.subscribe(topic, "*");
        offline.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                offlineGot.add(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        offline.start();

        DefaultMQProducer producer = new DefaultMQProducer(producerGroup, hook, true, null);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("dashboard-producer");
        producer.start();
        Set<String> sent = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < count; i++) {
            if (i == OFFLINE_READ) {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (!offlineGot.containsAll(sent) && System.nanoTime() < until) {
                    Thread.sleep(50);
                }
                offline.shutdown();
                System.out.println("OFFLINE READ " + offlineGot.size());
            }
            String key = "dash-key-" + i;
            SendResult r = producer.send(new Message(topic, i % 2 == 0 ? "TagA" : "TagB", key,
                ("dashboard-" + i).getBytes(StandardCharsets.UTF_8)));
            sent.add(r.getMsgId());
            System.out.println("SENT " + r.getMsgId() + " " + key);
        }

        Set<String> consumed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook,
            new AllocateMessageQueueAveragely(), true, null);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("dashboard-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                consumed.add(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
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
        System.out.println("READY");
        System.out.flush();
        while (System.in.read() != -1) {
            // Runs until its standard input closes.
        }
        producer.shutdown();
        consumer.shutdown();
    }
}
