package corvus.bench;

import java.time.Duration;
import java.util.Collections;
import java.util.Random;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * The load of {@link Load} through RocketMQ 5's gRPC SDK (rocketmq-client-java): one Producer
 * shared by N threads, each sending M-byte messages with a synchronous send() in a loop, and a
 * PushConsumer of a new group (the SDK's defaults: 20 consumption threads, POP receives)
 * counting what it receives. The endpoint is Apache's Proxy or corvus's broker port.
 *
 * What is measured and how: {@link Window}; the CPU counted is that of every PID given (broker
 * and Proxy for Apache RocketMQ, the broker for corvus).
 *
 * Usage: LoadV5 ENDPOINT TOPIC THREADS SIZE WARMUP_S MEASURE_S PID[,PID...]
 * Prints one line per second and, at the end, one line "RESULT {json}" with the keys of Load's.
 */
public final class LoadV5 {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int warmup = Integer.parseInt(args[4]);
        int measure = Integer.parseInt(args[5]);
        String[] pids = args[6].split(",");
        String group = "bench_consumer_" + System.nanoTime();
        Window w = new Window();

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint)
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10))
                .build();
        PushConsumer consumer = provider.newPushConsumerBuilder()
                .setClientConfiguration(config)
                .setConsumerGroup(group)
                .setSubscriptionExpressions(
                        Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .setMessageListener(view -> {
                    w.delivered(view.getBornTimestamp());
                    return ConsumeResult.SUCCESS;
                })
                .build();
        Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config)
                .setTopics(topic)
                .build();

        byte[] body = new byte[size];
        new Random(42).nextBytes(body);
        for (int i = 0; i < threads; i++) {
            w.startSender("sender-" + i, () -> {
                Message msg = provider.newMessageBuilder().setTopic(topic).setTag("TagA").setBody(body).build();
                producer.send(msg);
                return true;
            });
        }
        w.run(warmup, measure, pids);
        System.out.println("RESULT " + w.resultJson(threads, size, ",\"server_pids\":" + pids.length));
        producer.close();
        consumer.close();
        System.exit(0);
    }
}
