package corvus.v5;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.RecallReceipt;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * RocketMQ 5's gRPC SDK (rocketmq-client-java) scenarios against one gRPC endpoint (Apache's
 * Proxy, or a broker that serves {@code apache.rocketmq.v2.MessagingService} itself).
 *
 * <p>Usage: {@code Scenarios ENDPOINT SCENARIO [--tls] [--topic T] [--group G]}. Each scenario
 * prints a deterministic transcript on stdout (message ids, times and hosts never appear in it)
 * and ends with {@code OK SCENARIO} and exit 0 when everything it asserts held, or
 * {@code FAILED SCENARIO: cause} and exit 1. Every wait is bounded; nothing sleeps to assert.
 * Timings and other details that vary go to stderr.
 *
 * <p>Each scenario has a fixed topic (and group) the harness creates with the right
 * {@code message.type}: see {@link #TOPICS}. Every run needs fresh topics and groups.
 */
public final class Scenarios {
    /** Scenario → its topic and the topic's message type (the harness creates them). */
    static final Map<String, String[]> TOPICS = new LinkedHashMap<>();

    static {
        TOPICS.put("produce", new String[] {"V5Normal", "NORMAL"});
        TOPICS.put("fifo", new String[] {"V5Fifo", "FIFO"});
        TOPICS.put("delay", new String[] {"V5Delay", "DELAY"});
        TOPICS.put("delay-receive", new String[] {"V5DelayRecv", "DELAY"});
        TOPICS.put("transaction-send", new String[] {"V5TxnSend", "TRANSACTION"});
        TOPICS.put("transaction", new String[] {"V5Txn", "TRANSACTION"});
        TOPICS.put("simple", new String[] {"V5Simple", "NORMAL"});
        TOPICS.put("push", new String[] {"V5Push", "NORMAL"});
        TOPICS.put("fifo-push", new String[] {"V5FifoPush", "FIFO"});
        TOPICS.put("share", new String[] {"V5Share", "NORMAL"});
        TOPICS.put("recall", new String[] {"V5Recall", "DELAY"});
    }

    /** The receive's long-polling wait: every receive call returns within this (plus a request timeout). */
    static final Duration AWAIT = Duration.ofSeconds(3);
    /** The smallest invisible duration Apache's Proxy accepts on receive (minInvisibleTimeMillsForRecv). */
    static final Duration INVISIBLE = Duration.ofSeconds(10);

    /** When the program started, for the timings on stderr. */
    static final long T0 = System.nanoTime();

    final ClientServiceProvider provider = ClientServiceProvider.loadService();
    final ClientConfiguration cfg;
    final String topic;
    final String group;

    Scenarios(String endpoint, boolean tls, String topic, String group, String credentials) {
        var b = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint)
                .enableSsl(tls)
                .setRequestTimeout(Duration.ofSeconds(5));
        if (credentials != null) {
            // ACCESS_KEY:SECRET_KEY; every call is signed with them.
            int colon = credentials.indexOf(':');
            b.setCredentialProvider(new StaticSessionCredentialsProvider(
                    credentials.substring(0, colon), credentials.substring(colon + 1)));
        }
        this.cfg = b.build();
        this.topic = topic;
        this.group = group;
    }

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: Scenarios ENDPOINT SCENARIO [--tls] [--topic T] [--group G] [--credentials AK:SK]");
            System.err.println("scenarios (topic, message type): ");
            TOPICS.forEach((k, v) -> System.err.println("  " + k + " " + v[0] + " " + v[1]));
            System.exit(2);
        }
        String endpoint = args[0];
        String scenario = args[1];
        boolean tls = false;
        String[] fixed = TOPICS.get(scenario);
        if (fixed == null) {
            System.err.println("unknown scenario " + scenario);
            System.exit(2);
        }
        String topic = fixed[0];
        String group = null;
        String credentials = null;
        for (int i = 2; i < args.length; i++) {
            switch (args[i]) {
                case "--tls" -> tls = true;
                case "--topic" -> topic = args[++i];
                case "--group" -> group = args[++i];
                case "--credentials" -> credentials = args[++i];
                default -> {
                    System.err.println("unknown option " + args[i]);
                    System.exit(2);
                }
            }
        }
        if (group == null) {
            group = topic + "Group";
        }
        long t0 = System.nanoTime();
        int status = 0;
        try {
            Scenarios s = new Scenarios(endpoint, tls, topic, group, credentials);
            switch (scenario) {
                case "produce" -> s.produce();
                case "fifo" -> s.fifo();
                case "delay" -> s.delay();
                case "delay-receive" -> s.delayReceive();
                case "transaction-send" -> s.transactionSend();
                case "transaction" -> s.transaction();
                case "simple" -> s.simple();
                case "push" -> s.push();
                case "fifo-push" -> s.fifoPush();
                case "share" -> s.share();
                case "recall" -> s.recall();
                default -> throw new IllegalStateException("unreachable");
            }
            say("OK " + scenario);
        } catch (Throwable e) {
            say("FAILED " + scenario + ": " + cause(e));
            e.printStackTrace();
            status = 1;
        }
        System.err.printf("scenario %s took %.1f s%n", scenario, (System.nanoTime() - t0) / 1e9);
        // The SDK's client threads are not all daemons.
        System.exit(status);
    }

    // ---- helpers ----

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void note(String line) {
        System.err.println("note: " + line);
    }

    static String cause(Throwable e) {
        Throwable c = e;
        while (c.getCause() != null && c.getCause() != c) {
            c = c.getCause();
        }
        return c.getClass().getSimpleName() + ": " + c.getMessage();
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    /** Waits until {@code cond} holds, at most {@code limit}; false if it never did. */
    static boolean waitUntil(Duration limit, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + limit.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(50);
        }
        return true;
    }

    /**
     * Notes the settings {@code client} (a Producer or consumer) holds once the server's
     * Telemetry reply synced them (the SDK's own view, in protobuf text; for the notes on stderr).
     */
    static void noteSettings(String who, Object client) {
        try {
            Object settings = Class.forName("org.apache.rocketmq.client.java.impl.ClientImpl")
                    .getMethod("getSettings").invoke(client);
            Object pb = Class.forName("org.apache.rocketmq.client.java.impl.Settings")
                    .getMethod("toProtobuf").invoke(settings);
            note(who + " settings after the server's reply: " + pb.toString().replaceAll("\\s+", " "));
            // What the SDK took from the reply (retry policy, FIFO, batch size, body limit...).
            StringBuilder fields = new StringBuilder();
            for (Class<?> k = settings.getClass(); k != null && k != Object.class; k = k.getSuperclass()) {
                for (java.lang.reflect.Field f : k.getDeclaredFields()) {
                    if (java.lang.reflect.Modifier.isStatic(f.getModifiers())) {
                        continue;
                    }
                    f.setAccessible(true);
                    fields.append(' ').append(f.getName()).append('=').append(f.get(settings));
                }
            }
            note(who + " settings fields:" + fields.toString().replaceAll("\\s+", " "));
        } catch (ReflectiveOperationException | RuntimeException e) {
            note(who + " settings not readable: " + e);
        }
    }

    /** The SDK's receipt handle of {@code m} (not in the API; for the notes on stderr). */
    static String receiptHandle(MessageView m) {
        try {
            java.lang.reflect.Method get = m.getClass().getMethod("getReceiptHandle");
            get.setAccessible(true);
            return String.valueOf(get.invoke(m));
        } catch (ReflectiveOperationException e) {
            return "(not readable: " + e + ")";
        }
    }

    static String body(MessageView m) {
        return StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
    }

    MessageBuilder message(String body) {
        return provider.newMessageBuilder()
                .setTopic(topic)
                .setTag("TagA")
                .setKeys("key-" + body)
                .setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    Producer producer() throws ClientException {
        return provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic).build();
    }

    SimpleConsumer simpleConsumer(String topic, String group) throws ClientException {
        return provider.newSimpleConsumerBuilder()
                .setClientConfiguration(cfg)
                .setConsumerGroup(group)
                .setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .build();
    }

    void send(Producer p, Message m, String body) throws ClientException {
        SendReceipt r = p.send(m);
        check(r.getMessageId() != null && !r.getMessageId().toString().isEmpty(), "a message id for " + body);
        say("SENT " + body + " id=yes");
    }

    /**
     * Receives from {@code c} until {@code done} holds or {@code limit} passed, handing each
     * message to {@code each}; false if {@code done} never held.
     */
    static boolean receiveUntil(SimpleConsumer c, Duration invisible, Duration limit, BooleanSupplier done,
            MessageHandler each) throws Exception {
        long deadline = System.nanoTime() + limit.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            for (MessageView m : c.receive(16, invisible)) {
                each.handle(m);
            }
        }
        return true;
    }

    interface MessageHandler {
        void handle(MessageView m) throws Exception;
    }

    // ---- scenarios ----

    /** Three normal messages with tag, keys and body; each receipt has a message id. */
    void produce() throws Exception {
        try (Producer p = producer()) {
            noteSettings("producer", p);
            for (int i = 0; i < 3; i++) {
                String b = "normal-" + i;
                send(p, message(b).build(), b);
            }
        }
    }

    /** Six messages of two message groups, interleaved, to a FIFO topic. */
    void fifo() throws Exception {
        try (Producer p = producer()) {
            for (int i = 0; i < 3; i++) {
                for (String g : new String[] {"a", "b"}) {
                    String b = "fifo-" + g + "-" + i;
                    send(p, message(b).setMessageGroup("group-" + g).build(), b);
                }
            }
        }
    }

    /** One message with a delivery timestamp 2 s ahead, to a DELAY topic. */
    void delay() throws Exception {
        try (Producer p = producer()) {
            send(p, message("delay-0").setDeliveryTimestamp(System.currentTimeMillis() + 2000).build(), "delay-0");
        }
    }

    /**
     * A message due 2 s ahead is received once due, not earlier than its delivery timestamp
     * (less 1 s: Apache's timer wheel delivers by the second, timerPrecisionMs 1000), and
     * carries that timestamp.
     */
    void delayReceive() throws Exception {
        try (Producer p = producer(); SimpleConsumer c = simpleConsumer(topic, group)) {
            long due = System.currentTimeMillis() + 2000;
            send(p, message("delay-1").setDeliveryTimestamp(due).build(), "delay-1");
            List<MessageView> got = new ArrayList<>();
            long[] at = new long[1];
            boolean ok = receiveUntil(c, INVISIBLE, Duration.ofSeconds(40), () -> !got.isEmpty(), m -> {
                at[0] = System.currentTimeMillis();
                got.add(m);
                c.ack(m);
            });
            check(ok, "the delayed message arrived within 40 s");
            MessageView m = got.get(0);
            note("delay-1 arrived " + (at[0] - due) + " ms after its delivery timestamp");
            say("RECEIVED " + body(m) + " attempt=" + m.getDeliveryAttempt());
            check(at[0] >= due - 1000, "not early: arrived " + (due - at[0]) + " ms before its time");
            say("NOT EARLY");
            check(m.getDeliveryTimestamp().isPresent() && m.getDeliveryTimestamp().get() == due,
                    "the delivery timestamp is carried: " + m.getDeliveryTimestamp());
            say("DELIVERY TIMESTAMP carried");
        }
    }

    /**
     * RocketMQ 5.3.2's recall: two messages due 3 s ahead, each receipt with a recall handle;
     * the first recalled with its handle (the recall's receipt names its message id); a
     * SimpleConsumer gets the second and never the first; a recall of the delivered second
     * is refused. (Apache's broker needs recallMessageEnable=true for it.)
     */
    void recall() throws Exception {
        try (Producer p = producer(); SimpleConsumer c = simpleConsumer(topic, group)) {
            long due = System.currentTimeMillis() + 3000;
            SendReceipt first = p.send(message("recall-1").setDeliveryTimestamp(due).build());
            SendReceipt second = p.send(message("recall-2").setDeliveryTimestamp(due).build());
            for (SendReceipt r : List.of(first, second)) {
                check(r.getRecallHandle() != null && !r.getRecallHandle().isEmpty(),
                        "a recall handle in the receipt of " + r.getMessageId());
            }
            say("SENT recall-1 recall-2 handles=yes");
            RecallReceipt recalled = p.recallMessage(topic, first.getRecallHandle());
            check(recalled.getMessageId().toString().equals(first.getMessageId().toString()),
                    "the recall names the message: " + recalled.getMessageId());
            say("RECALLED recall-1");
            List<String> got = new ArrayList<>();
            boolean ok = receiveUntil(c, INVISIBLE, Duration.ofSeconds(40), () -> got.contains("recall-2"), m -> {
                got.add(body(m));
                c.ack(m);
            });
            check(ok, "recall-2 arrived within 40 s: " + got);
            // Both were due at the same time, recall-1 sent first: had it been delivered, it
            // would have come with or before recall-2.
            check(got.equals(List.of("recall-2")), "only recall-2 was delivered: " + got);
            say("RECEIVED " + String.join(" ", got));
            try {
                p.recallMessage(topic, second.getRecallHandle());
                check(false, "a recall of a delivered message succeeded");
            } catch (ClientException e) {
                note("the recall of the delivered message: " + e.getMessage());
                say("RECALL OF A DELIVERED MESSAGE refused");
            }
        }
    }

    Producer transactionalProducer(Set<String> checked) throws ClientException {
        return provider.newProducerBuilder()
                .setClientConfiguration(cfg)
                .setTopics(topic)
                .setTransactionChecker(view -> {
                    String b = body(view);
                    if (checked.add(b)) {
                        note("the broker checked " + b);
                    }
                    return b.endsWith("-unknown") ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
                })
                .build();
    }

    /** The send side of transactions: one half message committed, one rolled back. */
    void transactionSend() throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        try (Producer p = transactionalProducer(checked)) {
            sendInTransaction(p, "txn-commit").commit();
            say("COMMITTED txn-commit");
            sendInTransaction(p, "txn-rollback").rollback();
            say("ROLLED BACK txn-rollback");
        }
    }

    Transaction sendInTransaction(Producer p, String b) throws ClientException {
        Transaction tx = p.beginTransaction();
        SendReceipt r = p.send(message(b).build(), tx);
        check(r.getMessageId() != null, "a message id for " + b);
        say("SENT " + b + " id=yes");
        return tx;
    }

    /**
     * Transactions end to end: committed, rolled back, and one left open whose check-back the
     * TransactionChecker commits; a SimpleConsumer then gets the committed two, never the
     * rolled-back one.
     */
    void transaction() throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        try (Producer p = transactionalProducer(checked); SimpleConsumer c = simpleConsumer(topic, group)) {
            sendInTransaction(p, "txn-commit").commit();
            say("COMMITTED txn-commit");
            sendInTransaction(p, "txn-rollback").rollback();
            say("ROLLED BACK txn-rollback");
            sendInTransaction(p, "txn-unknown");
            say("LEFT OPEN txn-unknown");
            check(waitUntil(Duration.ofSeconds(60), () -> checked.contains("txn-unknown")),
                    "the broker checked txn-unknown back within 60 s");
            say("CHECKED txn-unknown -> COMMIT");
            Set<String> got = Collections.synchronizedSet(new HashSet<>());
            List<String> order = new CopyOnWriteArrayList<>();
            boolean ok = receiveUntil(c, INVISIBLE, Duration.ofSeconds(60),
                    () -> got.contains("txn-commit") && got.contains("txn-unknown"), m -> {
                        String b = body(m);
                        if (got.add(b)) {
                            order.add(b);
                        }
                        c.ack(m);
                    });
            check(ok, "the committed messages arrived within 60 s, got " + order);
            // One more receive past them: the rolled-back message is not there either.
            for (MessageView m : c.receive(16, INVISIBLE)) {
                got.add(body(m));
                c.ack(m);
            }
            List<String> sorted = new ArrayList<>(got);
            Collections.sort(sorted);
            say("RECEIVED " + String.join(" ", sorted));
            check(!got.contains("txn-rollback"), "the rolled-back message was never delivered");
            say("NEVER txn-rollback");
            check(!checked.contains("txn-commit") && !checked.contains("txn-rollback"),
                    "only the open transaction was checked, checked " + checked);
        }
    }

    /**
     * SimpleConsumer: receive and ack; a message left unacked comes back after its invisible
     * duration with deliveryAttempt 2; changeInvisibleDuration then keeps it away past the
     * first duration, and the ack with the handle it returned succeeds.
     */
    void simple() throws Exception {
        try (Producer p = producer(); SimpleConsumer c = simpleConsumer(topic, group)) {
            for (int i = 0; i < 3; i++) {
                String b = "simple-" + i;
                send(p, message(b).build(), b);
            }
            Map<String, MessageView> first = new TreeMap<>();
            long[] receivedAt = new long[1];
            boolean ok = receiveUntil(c, INVISIBLE, Duration.ofSeconds(30), () -> first.size() == 3, m -> {
                String b = body(m);
                check(first.put(b, m) == null, "no second delivery of " + b + " within its invisible time");
                if (b.equals("simple-2")) {
                    receivedAt[0] = System.nanoTime();
                }
            });
            check(ok, "all three received within 30 s, got " + first.keySet());
            noteSettings("simple consumer", c);
            note("a receipt handle as the server wrote it: " + receiptHandle(first.get("simple-0")));
            for (MessageView m : first.values()) {
                say("RECEIVED " + body(m) + " attempt=" + m.getDeliveryAttempt() + " tag="
                        + m.getTag().orElse("-") + " keys=" + String.join(",", m.getKeys()));
            }
            c.ack(first.get("simple-0"));
            c.ack(first.get("simple-1"));
            say("ACKED simple-0 simple-1");

            // simple-2 is not acked: it comes back once its invisible duration is over.
            List<MessageView> again = new ArrayList<>();
            ok = receiveUntil(c, INVISIBLE, Duration.ofSeconds(60), () -> !again.isEmpty(), m -> {
                check(body(m).equals("simple-2"), "only simple-2 comes back, not " + body(m));
                again.add(m);
            });
            check(ok, "simple-2 came back within 60 s");
            long after = (System.nanoTime() - receivedAt[0]) / 1_000_000;
            note("simple-2 came back " + after + " ms after its first receive");
            MessageView m2 = again.get(0);
            say("RECEIVED " + body(m2) + " attempt=" + m2.getDeliveryAttempt());
            check(m2.getDeliveryAttempt() == 2, "deliveryAttempt 2 on redelivery");
            check(after >= INVISIBLE.toMillis() - 1000, "not redelivered before its invisible duration: " + after + " ms");
            say("REDELIVERED after the invisible duration");

            // Extended to 25 s: it stays away past the 10 s it was received with.
            long extendedAt = System.nanoTime();
            c.changeInvisibleDuration(m2, Duration.ofSeconds(25));
            say("CHANGED invisible duration of simple-2 to 25s");
            while (System.nanoTime() - extendedAt < INVISIBLE.plusSeconds(5).toNanos()) {
                List<MessageView> l = c.receive(16, INVISIBLE);
                check(l.isEmpty(), "nothing delivered while simple-2 is invisible, got "
                        + (l.isEmpty() ? "" : body(l.get(0))));
            }
            say("NOT REDELIVERED within 15s");
            c.ack(m2);
            say("ACKED simple-2");
        }
    }

    /**
     * PushConsumer (concurrent): three messages consumed once; one whose listener always
     * fails is retried, with increasing deliveryAttempt, up to the group's max attempts, then
     * lands in the group's dead-letter queue (%DLQ%GROUP, read with a SimpleConsumer).
     */
    void push() throws Exception {
        Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
        try (Producer p = producer()) {
            PushConsumer pc = provider.newPushConsumerBuilder()
                    .setClientConfiguration(cfg)
                    .setConsumerGroup(group)
                    .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .setConsumptionThreadCount(4)
                    .setMessageListener(m -> {
                        String b = body(m);
                        attempts.computeIfAbsent(b, k -> new CopyOnWriteArrayList<>()).add(m.getDeliveryAttempt());
                        note(String.format("%.1f s: %s attempt %d", (System.nanoTime() - T0) / 1e9, b, m.getDeliveryAttempt()));
                        return b.equals("push-fail") ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
                    })
                    .build();
            noteSettings("push consumer", pc);
            try (pc) {
                for (String b : new String[] {"push-0", "push-1", "push-2", "push-fail"}) {
                    send(p, message(b).build(), b);
                }
                check(waitUntil(Duration.ofSeconds(30), () -> attempts.keySet().containsAll(
                        List.of("push-0", "push-1", "push-2"))), "the three consumed within 30 s: " + attempts.keySet());
                // Redelivered until the attempts stop growing: the message went to the DLQ.
                // The dead-letter topic exists once the first message went there.
                String dlqTopic = "%DLQ%" + group;
                SimpleConsumer dlqConsumer = null;
                long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
                while (dlqConsumer == null) {
                    try {
                        dlqConsumer = simpleConsumer(dlqTopic, group + "-dlq");
                    } catch (ClientException | IllegalStateException e) {
                        check(System.nanoTime() < deadline, "push-fail reached " + dlqTopic
                                + " within 120 s; attempts " + attempts + "; last: " + cause(e));
                        Thread.sleep(500);
                    }
                }
                note("the consumer of " + dlqTopic + " started; attempts " + attempts);
                try (SimpleConsumer dlq = dlqConsumer) {
                    List<String> dead = new ArrayList<>();
                    boolean ok = receiveUntil(dlq, INVISIBLE, Duration.ofSeconds(60), () -> !dead.isEmpty(), m -> {
                        dead.add(body(m) + " attempt=" + m.getDeliveryAttempt());
                        dlq.ack(m);
                    });
                    check(ok, "push-fail received from " + dlqTopic + " within 120 s; attempts " + attempts);
                    for (String b : new TreeMap<>(attempts).keySet()) {
                        say("CONSUMED " + b + " attempts=" + attempts.get(b));
                    }
                    say("DLQ " + String.join(" ", dead));
                }
            }
        }
        check(attempts.get("push-fail").size() >= 2, "push-fail retried");
    }

    /** FIFO PushConsumer: each message group arrives in the order it was sent. */
    void fifoPush() throws Exception {
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        try (Producer p = producer()) {
            for (int i = 0; i < 4; i++) {
                for (String g : new String[] {"a", "b"}) {
                    String b = "fifo-" + g + "-" + i;
                    send(p, message(b).setMessageGroup("group-" + g).build(), b);
                }
            }
            PushConsumer pc = provider.newPushConsumerBuilder()
                    .setClientConfiguration(cfg)
                    .setConsumerGroup(group)
                    .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .setConsumptionThreadCount(4)
                    .setMessageListener(m -> {
                        String g = m.getMessageGroup().orElse("-");
                        int i = Integer.parseInt(body(m).substring(body(m).lastIndexOf('-') + 1));
                        seen.computeIfAbsent(g, k -> new CopyOnWriteArrayList<>()).add(i);
                        note(String.format("%.1f s: %s", (System.nanoTime() - T0) / 1e9, body(m)));
                        return ConsumeResult.SUCCESS;
                    })
                    .build();
            noteSettings("fifo push consumer", pc);
            try (pc) {
                check(waitUntil(Duration.ofSeconds(40), () -> seen.values().stream().mapToInt(List::size).sum() >= 8),
                        "all eight consumed within 40 s: " + seen);
            }
        }
        for (String g : new TreeMap<>(seen).keySet()) {
            say("GROUP " + g + " " + seen.get(g));
            check(seen.get(g).equals(List.of(0, 1, 2, 3)), "group " + g + " in order");
        }
    }

    /**
     * Two SimpleConsumers of one group: the first takes a batch of at most 3 and keeps it
     * invisible, the second gets the rest; both ack in time and no message reaches both.
     */
    void share() throws Exception {
        final int n = 8;
        try (Producer p = producer();
                SimpleConsumer a = simpleConsumer(topic, group);
                SimpleConsumer b = simpleConsumer(topic, group)) {
            for (int i = 0; i < n; i++) {
                String s = "share-" + i;
                send(p, message(s).build(), s);
            }
            Map<String, String> by = new ConcurrentHashMap<>();
            List<String> dup = new CopyOnWriteArrayList<>();
            List<MessageView> firstBatch = new ArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (firstBatch.isEmpty() && System.nanoTime() < deadline) {
                firstBatch.addAll(a.receive(3, Duration.ofSeconds(30)));
            }
            check(!firstBatch.isEmpty(), "the first consumer received within 30 s");
            for (MessageView m : firstBatch) {
                by.put(body(m), "a");
            }
            boolean ok = receiveUntil(b, Duration.ofSeconds(30), Duration.ofSeconds(30), () -> by.size() == n, m -> {
                if (by.putIfAbsent(body(m), "b") != null) {
                    dup.add(body(m));
                }
                b.ack(m);
            });
            for (MessageView m : firstBatch) {
                a.ack(m);
            }
            check(ok, "all " + n + " received within 30 s, got " + new TreeMap<>(by).keySet());
            // One more receive on each: nothing is left, and nothing comes twice.
            for (SimpleConsumer c : List.of(a, b)) {
                for (MessageView m : c.receive(16, INVISIBLE)) {
                    dup.add(body(m));
                    c.ack(m);
                }
            }
            long onA = by.values().stream().filter("a"::equals).count();
            note("first consumer " + onA + ", second " + (n - onA));
            say("SHARED " + n + " distinct=" + by.size() + " duplicates=" + dup.size()
                    + " both=" + (onA > 0 && onA < n ? "yes" : "no"));
            check(dup.isEmpty(), "no message delivered to both: " + dup);
            check(onA > 0 && onA < n, "both consumers got some");
        }
    }
}
