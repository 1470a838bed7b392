package corvus.v52;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/**
 * Priority messages (RocketMQ 5.4) through the v5 gRPC SDK, as RocketMQ's own example sends
 * them ({@code MessageBuilder.setPriority}) to a topic with {@code message.type=PRIORITY}.
 *
 * <pre>
 * Priority send ENDPOINT TOPIC ROUNDS       each round sends priorities 0..9, lowest first;
 *                                           prints SENT p&lt;P&gt;-r&lt;R&gt; per acknowledged send
 * Priority receive ENDPOINT TOPIC GROUP N   a SimpleConsumer receives (batches of 16) and acks
 *                                           until N distinct messages came; prints
 *                                           RECEIVED p&lt;P&gt;-r&lt;R&gt; priority=&lt;P&gt; broker=&lt;B&gt; per
 *                                           message, in order (B: the broker it came from)
 * </pre>
 *
 * Ends with {@code OK} and exit 0, or {@code FAILED cause} and exit 1. Waits are bounded.
 */
public final class Priority {
    static final Duration INVISIBLE = Duration.ofSeconds(30);
    static final Duration RECEIVE_LIMIT = Duration.ofSeconds(90);

    public static void main(String[] args) {
        if (args.length < 4) {
            System.err.println("usage: Priority send ENDPOINT TOPIC ROUNDS | receive ENDPOINT TOPIC GROUP N");
            System.exit(2);
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration cfg = ClientConfiguration.newBuilder()
                .setEndpoints(args[1])
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(5))
                .build();
        String topic = args[2];
        int status = 0;
        try {
            switch (args[0]) {
                case "send" -> send(provider, cfg, topic, Integer.parseInt(args[3]));
                case "receive" -> receive(provider, cfg, topic, args[3], Integer.parseInt(args[4]));
                default -> throw new IllegalArgumentException("unknown mode " + args[0]);
            }
            System.out.println("OK");
        } catch (Throwable e) {
            System.out.println("FAILED " + e);
            e.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }

    static void send(ClientServiceProvider provider, ClientConfiguration cfg, String topic, int rounds)
            throws Exception {
        try (Producer p = provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic).build()) {
            for (int r = 0; r < rounds; r++) {
                for (int prio = 0; prio < 10; prio++) {
                    String body = "p" + prio + "-r" + r;
                    SendReceipt receipt = p.send(provider.newMessageBuilder()
                            .setTopic(topic)
                            .setTag("TagA")
                            .setKeys("key-" + body)
                            .setPriority(prio)
                            .setBody(body.getBytes(StandardCharsets.UTF_8))
                            .build());
                    if (receipt.getMessageId() == null) {
                        throw new IllegalStateException("no message id for " + body);
                    }
                    System.out.println("SENT " + body);
                }
            }
        }
    }

    static void receive(ClientServiceProvider provider, ClientConfiguration cfg, String topic, String group,
            int expected) throws Exception {
        Set<String> seen = new LinkedHashSet<>();
        long deadline = System.nanoTime() + RECEIVE_LIMIT.toNanos();
        try (SimpleConsumer c = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(cfg)
                .setConsumerGroup(group)
                .setAwaitDuration(Duration.ofSeconds(3))
                .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .build()) {
            while (seen.size() < expected) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("received " + seen.size() + " of " + expected + " in "
                            + RECEIVE_LIMIT.toSeconds() + " s");
                }
                List<MessageView> got = c.receive(16, INVISIBLE);
                for (MessageView m : got) {
                    String body = StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
                    String priority = m.getPriority().map(String::valueOf).orElse("none");
                    // The broker (a corvus core) the message came from: the queue of the
                    // assignment it was received on.
                    String broker = m instanceof MessageViewImpl v
                            ? v.getMessageQueue().getBroker().getName()
                            : "?";
                    System.out.println("RECEIVED " + body + " priority=" + priority + " broker=" + broker);
                    seen.add(body);
                    c.ack(m);
                }
            }
        }
    }
}
