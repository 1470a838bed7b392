package corvus.v52;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * Lite Topics (RocketMQ 5.5) through the v5 gRPC SDK for Java, as RocketMQ's own examples use
 * them: a producer sets {@code MessageBuilder.setLiteTopic} on messages of a parent topic with
 * {@code message.type=LITE}, and a {@code LitePushConsumer} bound to the parent subscribes
 * lite topics one by one ({@code subscribeLite}).
 *
 * <pre>
 * Lite send ENDPOINT TOPIC LITES N [FROM]
 *     sends N messages to each lite topic of LITES (comma-separated), the lite topics in
 *     turn; body "LITE#K", K from FROM (0); prints SENT LITE#K per acknowledged send
 * Lite consume ENDPOINT TOPIC GROUP LITES TOTAL [FAIL_ONCE]
 *     a LitePushConsumer subscribes each lite topic of LITES and consumes until TOTAL distinct
 *     messages succeeded; prints RECEIVED LITE#K lite=L attempt=A per delivery, in the order
 *     the listener saw them; the first delivery of FAIL_ONCE (a body) fails once. Then it
 *     unsubscribes the first lite topic of LITES and prints its lite topic set.
 * Lite survive ENDPOINT TOPIC GROUP LITES TOTAL HALF MARK
 *     a LitePushConsumer subscribes each lite topic of LITES and consumes until TOTAL distinct
 *     messages succeeded (within 240 s), printing RECEIVED as consume does; once HALF have,
 *     it creates the file MARK (the test then restarts the broker and sends the rest).
 * Lite exclusive ENDPOINT TOPIC GROUP LITE N
 *     two LitePushConsumers of GROUP (an Exclusive group) subscribe LITE in turn; once the
 *     first is told it lost LITE (its lite topic set no longer has it), prints "FIRST LOST
 *     LITE", sends N messages to LITE and waits until the second consumed them; prints
 *     RECEIVED BY first|second LITE#K per delivery.
 * </pre>
 *
 * Ends with {@code OK} and exit 0, or {@code FAILED cause} and exit 1. Waits are bounded.
 */
public final class Lite {
    static final Duration CONSUME_LIMIT = Duration.ofSeconds(90);

    public static void main(String[] args) {
        if (args.length < 5) {
            System.err.println("usage: Lite send ENDPOINT TOPIC LITES N | consume ENDPOINT TOPIC GROUP LITES TOTAL [FAIL_ONCE]");
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
                case "send" -> send(provider, cfg, topic, args[3].split(","), Integer.parseInt(args[4]),
                        args.length > 5 ? Integer.parseInt(args[5]) : 0);
                case "survive" -> survive(provider, cfg, topic, args[3], args[4].split(","),
                        Integer.parseInt(args[5]), Integer.parseInt(args[6]), java.nio.file.Path.of(args[7]));
                case "consume" -> consume(provider, cfg, topic, args[3], args[4].split(","),
                        Integer.parseInt(args[5]), args.length > 6 ? args[6] : null);
                case "exclusive" -> exclusive(provider, cfg, topic, args[3], args[4],
                        Integer.parseInt(args[5]));
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

    static void send(ClientServiceProvider provider, ClientConfiguration cfg, String topic, String[] lites, int n,
            int from) throws Exception {
        try (Producer p = provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic).build()) {
            for (int k = from; k < from + n; k++) {
                for (String lite : lites) {
                    String body = lite + "#" + k;
                    SendReceipt receipt = p.send(provider.newMessageBuilder()
                            .setTopic(topic)
                            .setLiteTopic(lite)
                            .setKeys("key-" + body)
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

    static void consume(ClientServiceProvider provider, ClientConfiguration cfg, String topic, String group,
            String[] lites, int total, String failOnce) throws Exception {
        Set<String> done = ConcurrentHashMap.newKeySet();
        Map<String, Boolean> failed = new ConcurrentHashMap<>();
        AtomicBoolean bad = new AtomicBoolean(false);
        LitePushConsumer consumer = provider.newLitePushConsumerBuilder()
                .setClientConfiguration(cfg)
                .setConsumerGroup(group)
                .bindTopic(topic)
                .setMessageListener(view -> {
                    String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                    String lite = view.getLiteTopic().orElse("?");
                    synchronized (System.out) {
                        System.out.println("RECEIVED " + body + " lite=" + lite + " attempt="
                                + view.getDeliveryAttempt());
                    }
                    if (!body.startsWith(lite + "#")) {
                        bad.set(true);
                    }
                    if (body.equals(failOnce) && failed.putIfAbsent(body, true) == null) {
                        return ConsumeResult.FAILURE;
                    }
                    done.add(body);
                    return ConsumeResult.SUCCESS;
                })
                .build();
        try {
            for (String lite : lites) {
                consumer.subscribeLite(lite);
            }
            long deadline = System.nanoTime() + CONSUME_LIMIT.toNanos();
            while (done.size() < total && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
            if (done.size() < total) {
                throw new IllegalStateException("consumed " + done.size() + " of " + total + ": " + done);
            }
            if (bad.get()) {
                throw new IllegalStateException("a message came with another lite topic than its own");
            }
            consumer.unsubscribeLite(lites[0]);
            System.out.println("SUBSCRIBED " + String.join(",", new java.util.TreeSet<>(consumer.getLiteTopicSet())));
        } finally {
            consumer.close();
        }
    }

    static LitePushConsumer listening(ClientServiceProvider provider, ClientConfiguration cfg, String topic,
            String group, String name, Set<String> done) throws Exception {
        return provider.newLitePushConsumerBuilder()
                .setClientConfiguration(cfg)
                .setConsumerGroup(group)
                .bindTopic(topic)
                .setMessageListener(view -> {
                    String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                    synchronized (System.out) {
                        System.out.println("RECEIVED BY " + name + " " + body);
                    }
                    done.add(body);
                    return ConsumeResult.SUCCESS;
                })
                .build();
    }

    static void exclusive(ClientServiceProvider provider, ClientConfiguration cfg, String topic, String group,
            String lite, int n) throws Exception {
        Set<String> firstDone = ConcurrentHashMap.newKeySet();
        Set<String> secondDone = ConcurrentHashMap.newKeySet();
        try (LitePushConsumer first = listening(provider, cfg, topic, group, "first", firstDone);
                LitePushConsumer second = listening(provider, cfg, topic, group, "second", secondDone)) {
            first.subscribeLite(lite);
            second.subscribeLite(lite);
            long deadline = System.nanoTime() + CONSUME_LIMIT.toNanos();
            while (first.getLiteTopicSet().contains(lite) && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
            if (first.getLiteTopicSet().contains(lite)) {
                throw new IllegalStateException("the first consumer was never told it lost " + lite);
            }
            System.out.println("FIRST LOST " + lite);
            send(provider, cfg, topic, new String[] {lite}, n, 0);
            while (secondDone.size() < n && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
            if (secondDone.size() < n) {
                throw new IllegalStateException("the second consumer got " + secondDone.size() + " of " + n);
            }
            if (!firstDone.isEmpty()) {
                throw new IllegalStateException("the first consumer got " + firstDone);
            }
            System.out.println("SECOND HAS " + String.join(",", new java.util.TreeSet<>(second.getLiteTopicSet())));
        }
    }

    static void survive(ClientServiceProvider provider, ClientConfiguration cfg, String topic, String group,
            String[] lites, int total, int half, java.nio.file.Path mark) throws Exception {
        Set<String> done = ConcurrentHashMap.newKeySet();
        try (LitePushConsumer consumer = provider.newLitePushConsumerBuilder()
                .setClientConfiguration(cfg)
                .setConsumerGroup(group)
                .bindTopic(topic)
                .setMessageListener(view -> {
                    String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                    String lite = view.getLiteTopic().orElse("?");
                    synchronized (System.out) {
                        System.out.println("RECEIVED " + body + " lite=" + lite + " attempt="
                                + view.getDeliveryAttempt());
                    }
                    done.add(body);
                    return ConsumeResult.SUCCESS;
                })
                .build()) {
            for (String lite : lites) {
                consumer.subscribeLite(lite);
            }
            long deadline = System.nanoTime() + Duration.ofSeconds(240).toNanos();
            boolean marked = false;
            while (done.size() < total && System.nanoTime() < deadline) {
                if (!marked && done.size() >= half) {
                    java.nio.file.Files.writeString(mark, "half\n");
                    marked = true;
                }
                Thread.sleep(50);
            }
            if (done.size() < total) {
                throw new IllegalStateException("consumed " + done.size() + " of " + total + ": " + done);
            }
        }
    }
}
