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

/**
 * A push consumer subscribes to a topic that does not exist yet; then a producer's first
 * send creates it (the broker's auto-creation). The consumer must start consuming within
 * BOUND_MS of that first send, not at its client's next route poll (every 30 s).
 *
 * With "shared", producer and consumer share one client instance (the same instance name, as
 * an application that names neither gets), so the producer's route lookups feed the
 * consumer; otherwise each has its own.
 *
 * Usage: AutoCreate NAMESRV TOPIC GROUP BOUND_MS [shared]. Prints FIRST RECEIVED AFTER n ms
 * (or NOTHING RECEIVED) and STARTED IN TIME or NOT STARTED IN TIME; exit 0 when in time.
 */
public class AutoCreate {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String group = args[2];
        long boundMs = Long.parseLong(args[3]);
        boolean shared = args.length > 4 && args[4].equals("shared");

        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName(shared ? "autocreate" : "autocreate-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long starting = System.nanoTime();
        consumer.start();
        System.out.println("CONSUMER STARTED IN "
            + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - starting) + " ms");

        DefaultMQProducer producer = new DefaultMQProducer("JavaAutoCreateProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName(shared ? "autocreate" : "autocreate-producer");
        producer.start();
        // The consumer has looked its topic up and found nothing; now the topic comes.
        Thread.sleep(1000);
        long first = System.nanoTime();
        long deadline = first + TimeUnit.MILLISECONDS.toNanos(Math.max(boundMs, 1) * 2 + 5000);
        long receivedAfter = -1;
        int sent = 0;
        while (System.nanoTime() < deadline) {
            try {
                producer.send(new Message(topic, ("auto-" + sent).getBytes(StandardCharsets.UTF_8)));
                sent++;
            } catch (Exception e) {
                System.out.println("SEND ERROR " + e);
            }
            if (!got.isEmpty()) {
                receivedAfter = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - first);
                break;
            }
            Thread.sleep(100);
        }
        System.out.println(receivedAfter < 0 ? "NOTHING RECEIVED" : "FIRST RECEIVED AFTER " + receivedAfter + " ms");
        consumer.shutdown();
        producer.shutdown();
        boolean ok = receivedAfter >= 0 && receivedAfter <= boundMs;
        System.out.println(ok ? "STARTED IN TIME" : "NOT STARTED IN TIME");
        System.exit(ok ? 0 : 1);
    }
}
