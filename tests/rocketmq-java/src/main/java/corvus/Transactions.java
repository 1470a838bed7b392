package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * RocketMQ's TransactionMQProducer against corvus: a transaction committed at once, one
 * rolled back, one left UNKNOW and committed when the broker checks back. A push consumer
 * of a new group prints what it receives.
 *
 * Usage: Transactions NAMESRV TOPIC GROUP. Prints CHECKED key, GOT key (one per delivery)
 * and DONE once the committed ones arrived and the check happened; exit 0.
 */
public class Transactions {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        Map<String, AtomicInteger> got = new ConcurrentHashMap<>();
        AtomicInteger checks = new AtomicInteger();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group + "-consumer");
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("tx-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String key = m.getKeys();
                got.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
                System.out.println("GOT " + key);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("tx-producer");
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch (msg.getKeys()) {
                    case "java-commit": return LocalTransactionState.COMMIT_MESSAGE;
                    case "java-rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("CHECKED " + msg.getKeys() + " topic " + msg.getTopic());
                checks.incrementAndGet();
                return "java-rollback".equals(msg.getKeys())
                    ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        for (String key : new String[] {"java-commit", "java-rollback", "java-later"}) {
            Message m = new Message(topic, "TagTx", key, key.getBytes(StandardCharsets.UTF_8));
            TransactionSendResult r = producer.sendMessageInTransaction(m, null);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException(key + ": " + r);
            }
            System.out.println("SENT " + key + " " + r.getLocalTransactionState());
        }
        long deadline = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < deadline
                && !(got.containsKey("java-commit") && got.containsKey("java-later")
                    && checks.get() > 0)) {
            TimeUnit.MILLISECONDS.sleep(100);
        }
        // A moment for a duplicate or a rolled-back message to show, if one were coming.
        TimeUnit.SECONDS.sleep(2);
        producer.shutdown();
        consumer.shutdown();
        if (!got.containsKey("java-commit") || !got.containsKey("java-later")) {
            System.out.println("MISSING " + got);
            System.exit(1);
        }
        System.out.println("DONE");
        System.exit(0);
    }
}
