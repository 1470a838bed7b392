package corvus.bench;

import java.util.Random;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * A load driver over RocketMQ's remoting protocol, written after Apache RocketMQ's own
 * benchmark tool (rocketmq-example's org.apache.rocketmq.example.benchmark.Producer and
 * Consumer, which Maven Central does not serve): one DefaultMQProducer shared by N threads,
 * each sending M-byte messages with a synchronous send() in a loop (as the tool does), and a
 * DefaultMQPushConsumer of a new group counting what it receives (default consume threads
 * and pull batch, as the tool's Consumer).
 *
 * What is measured and how: {@link Window}; the CPU counted is the broker's.
 *
 * Usage: Load NAMESRV TOPIC THREADS SIZE WARMUP_S MEASURE_S BROKER_PID [GROUP]
 * Prints one line per second and, at the end, one line "RESULT {json}".
 */
public final class Load {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int warmup = Integer.parseInt(args[4]);
        int measure = Integer.parseInt(args[5]);
        String brokerPid = args[6];
        String group = args.length > 7 ? args[7] : "bench_consumer_" + System.nanoTime();
        Window w = new Window();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(m -> w.delivered(m.getBornTimestamp()));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer("bench_producer");
        producer.setNamesrvAddr(ns);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setSendMsgTimeout(10_000);
        producer.start();

        byte[] body = new byte[size];
        new Random(42).nextBytes(body);
        for (int i = 0; i < threads; i++) {
            w.startSender("sender-" + i, () -> {
                SendResult r = producer.send(new Message(topic, "TagA", body));
                return r.getSendStatus() == SendStatus.SEND_OK;
            });
        }
        w.run(warmup, measure, brokerPid);
        System.out.println("RESULT " + w.resultJson(threads, size, ""));
        producer.shutdown();
        consumer.shutdown();
        System.exit(0);
    }
}
