package corvus.proxy;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * RocketMQ's v5 gRPC SDK (rocketmq-client-java) against a Proxy: a producer sends COUNT normal
 * messages to TOPIC ("SENT i"), then tries what needs more of the broker behind the Proxy: a
 * message with a delivery timestamp, one with a message group (FIFO), and a SimpleConsumer's
 * receive (POP). Each of those prints "OK what" or "FAILED what: cause".
 *
 * <p>Usage: {@code GrpcProducer PROXY_ENDPOINT TOPIC COUNT}. Exits 0 once the COUNT normal
 * sends succeeded (the others are reported, not required), 1 otherwise.
 */
public final class GrpcProducer {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint)
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(5))
                .build();
        int status = 0;
        Producer started;
        try {
            started = provider.newProducerBuilder()
                    .setClientConfiguration(cfg)
                    .setTopics(topic)
                    .build();
            System.out.println("OK producer start");
        } catch (Exception e) {
            System.out.println("FAILED producer start: " + cause(e));
            System.out.println("NOT ALL SENT");
            System.exit(1);
            return;
        }
        try (Producer producer = started) {
            for (int i = 0; i < count; i++) {
                Message m = provider.newMessageBuilder()
                        .setTopic(topic)
                        .setTag("TagG")
                        .setKeys("grpc-key-" + i)
                        .setBody(("grpc-" + i).getBytes(StandardCharsets.UTF_8))
                        .build();
                try {
                    SendReceipt r = producer.send(m);
                    System.out.println("SENT " + i + " " + (r.getMessageId() != null));
                } catch (Exception e) {
                    System.out.println("FAILED send " + i + ": " + cause(e));
                    status = 1;
                }
            }
            attempt("send with a delivery timestamp", () -> producer.send(provider.newMessageBuilder()
                    .setTopic(topic)
                    .setBody("grpc-delayed".getBytes(StandardCharsets.UTF_8))
                    .setDeliveryTimestamp(System.currentTimeMillis() + 1000)
                    .build()));
            attempt("send with a message group", () -> producer.send(provider.newMessageBuilder()
                    .setTopic(topic)
                    .setBody("grpc-fifo".getBytes(StandardCharsets.UTF_8))
                    .setMessageGroup("g1")
                    .build()));
        }
        attempt("SimpleConsumer receive", () -> {
            try (SimpleConsumer c = provider.newSimpleConsumerBuilder()
                    .setClientConfiguration(cfg)
                    .setConsumerGroup("grpc-simple")
                    .setAwaitDuration(Duration.ofSeconds(2))
                    .setSubscriptionExpressions(java.util.Map.of(topic, FilterExpression.SUB_ALL))
                    .build()) {
                List<MessageView> got = c.receive(16, Duration.ofSeconds(15));
                System.out.println("received " + got.size());
                return got;
            }
        });
        System.out.println(status == 0 ? "ALL SENT " + count : "NOT ALL SENT");
        System.exit(status);
    }

    interface Op {
        Object run() throws Exception;
    }

    static void attempt(String what, Op op) {
        try {
            op.run();
            System.out.println("OK " + what);
        } catch (Exception e) {
            System.out.println("FAILED " + what + ": " + cause(e));
        }
    }

    static String cause(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (b.length() > 0) {
                b.append(" <- ");
            }
            b.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return b.toString().replace('\n', ' ');
    }
}
