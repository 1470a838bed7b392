package corvus.diff;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Date;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Pattern;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The differential harness's scenario program: each scenario drives Apache's RocketMQ Java
 * client (4.9.8 or 5.3.3, whichever this was built against) through one feature and prints a
 * normalised transcript: one line an observation, prefixed by the scenario's name, with what
 * legitimately differs between two brokers (message ids, times, hosts, offsets that depend on
 * which queue a client picked, the run's tag in names) replaced by placeholders. The same
 * program runs against Apache RocketMQ 5.3.3 and against corvus; tests/rocketmq-diff/diff.py
 * compares the two transcripts.
 *
 * <p>Usage: {@code Diff NAMESRV TAG SCENARIO...}. Every topic and group a run makes carries TAG,
 * so runs of both clients can share one broker; TAG never appears in the output.
 */
public final class Diff {
    static String ns;
    static String tag;
    static PrintStream out = System.out;
    static DefaultMQAdminExt admin;
    static String brokerName;
    static String brokerAddr;
    static final List<Runnable> closers = new ArrayList<>();

    interface Scenario {
        void run(String name) throws Exception;
    }

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("send_sync", Diff::sendSync);
        SCENARIOS.put("send_async", Diff::sendAsync);
        SCENARIOS.put("send_oneway", Diff::sendOneway);
        SCENARIOS.put("send_batch", Diff::sendBatch);
        SCENARIOS.put("send_queue", Diff::sendQueue);
        SCENARIOS.put("ordered", Diff::ordered);
        SCENARIOS.put("tag_filter", Diff::tagFilter);
        SCENARIOS.put("sql_filter", Diff::sqlFilter);
        SCENARIOS.put("keys_ids", Diff::keysIds);
        SCENARIOS.put("delay_level", Diff::delayLevel);
        SCENARIOS.put("timer", Diff::timer);
        SCENARIOS.put("transaction", Diff::transaction);
        SCENARIOS.put("broadcast", Diff::broadcast);
        SCENARIOS.put("rebalance", Diff::rebalance);
        SCENARIOS.put("retry_dlq", Diff::retryDlq);
        SCENARIOS.put("offset_reset", Diff::offsetReset);
        SCENARIOS.put("start_positions", Diff::startPositions);
        SCENARIOS.put("lite_pull", Diff::litePull);
        SCENARIOS.put("admin_configs", Diff::adminConfigs);
        SCENARIOS.put("unknown_topic", Diff::unknownTopic);
        SCENARIOS.put("orderly_leave", Diff::orderlyLeave);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Diff NAMESRV TAG SCENARIO... (scenarios: " + SCENARIOS.keySet() + ")");
            System.exit(2);
        }
        // The transcript alone goes to standard output; the clients' own console logging (the
        // 4.9 client's logback prints INFO lines there) goes to standard error.
        out = System.out;
        System.setOut(System.err);
        ns = args[0];
        tag = args[1];
        List<String> names = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            if (args[i].equals("all")) {
                names.addAll(SCENARIOS.keySet());
            } else {
                names.add(args[i]);
            }
        }
        System.err.println("client " + MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION));
        admin = new DefaultMQAdminExt("diff-admin" + tag);
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("diff-admin" + tag);
        admin.start();
        findBroker();
        int failed = 0;
        for (String name : names) {
            Scenario s = SCENARIOS.get(name);
            if (s == null) {
                System.err.println("unknown scenario " + name);
                System.exit(2);
            }
            long t0 = System.nanoTime();
            try {
                s.run(name);
            } catch (Throwable e) {
                failed++;
                say(name, "ERROR " + describe(e));
                e.printStackTrace();
            } finally {
                closeAll();
            }
            System.err.printf("scenario %s took %d ms%n", name, (System.nanoTime() - t0) / 1_000_000);
        }
        admin.shutdown();
        System.err.println("scenarios with an error: " + failed);
        // Client threads (netty, timers) can outlive shutdown(); the transcript is complete.
        System.exit(0);
    }

    // ---------------------------------------------------------------- output and normalisation

    static void say(String scenario, String line) {
        out.println(scenario + " " + norm(line));
        out.flush();
    }

    static final Pattern HEX_ID = Pattern.compile("\\b[0-9A-F]{24,40}\\b");
    static final Pattern MILLIS = Pattern.compile("\\b1[0-9]{12}\\b");
    static final Pattern HOST = Pattern.compile("\\b(127\\.0\\.0\\.1|[0-9]{1,3}(\\.[0-9]{1,3}){3}):[0-9]+\\b");

    /** Removes the run's tag and replaces ids, epoch milliseconds and host:port by placeholders. */
    static String norm(String s) {
        s = s.replace(tag, "");
        s = HEX_ID.matcher(s).replaceAll("<id>");
        s = MILLIS.matcher(s).replaceAll("<ms>");
        s = HOST.matcher(s).replaceAll("<host>");
        return s;
    }

    /** Properties whose values differ between any two brokers or runs (times, ids, offsets). */
    static final Set<String> VARYING = new HashSet<>(List.of(
            "UNIQ_KEY", "CONSUME_START_TIME", "MIN_OFFSET", "MAX_OFFSET", "__STARTDELIVERTIME",
            "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_DELIVER_MS",
            "ORIGIN_MESSAGE_ID", "TRAN_PREPARED_QUEUE_OFFSET", "__transactionId__", "TRANSACTION_ID",
            "POP_CK", "1ST_POP_TIME", "INNER_MULTI_QUEUE_OFFSET", "bname",
            // The queue a delayed or transactional message was sent to (the client's choice
            // unless the scenario picks it) and corvus's record CRC (covers the times).
            "REAL_QID", "__CRC"));

    /**
     * A received message as a consumer sees it, normalised: a line of its fields, then a line a
     * property, each starting with its body, so that one property more or less is one line of
     * difference.
     */
    static List<String> msg(MessageExt m, boolean withQueue) {
        List<String> lines = new ArrayList<>();
        String body = "body=" + new String(m.getBody(), StandardCharsets.UTF_8);
        StringBuilder b = new StringBuilder(body);
        b.append(" topic=").append(m.getTopic());
        if (withQueue) {
            b.append(" qid=").append(m.getQueueId());
        }
        b.append(" tags=").append(m.getTags());
        b.append(" keys=").append(m.getKeys());
        b.append(" delayLevel=").append(m.getDelayTimeLevel());
        b.append(" reconsume=").append(m.getReconsumeTimes());
        b.append(" sysflag=").append(m.getSysFlag());
        lines.add(b.toString());
        for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
            lines.add(body + " prop " + e.getKey() + "="
                    + (VARYING.contains(e.getKey()) ? "<v>" : e.getValue()));
        }
        return lines;
    }

    static String describe(Throwable e) {
        if (e instanceof MQBrokerException) {
            return "MQBrokerException code=" + ((MQBrokerException) e).getResponseCode();
        }
        if (e instanceof MQClientException) {
            MQClientException c = (MQClientException) e;
            String m = String.valueOf(c.getErrorMessage());
            String kind = m.contains("No route info") ? " no-route-info" : "";
            Throwable cause = c.getCause();
            String inner = cause == null ? "" : " cause=(" + describe(cause) + ")";
            return "MQClientException code=" + c.getResponseCode() + kind + inner;
        }
        return e.getClass().getSimpleName();
    }

    // ---------------------------------------------------------------- set-up helpers

    static void findBroker() throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            try {
                var info = admin.examineBrokerClusterInfo();
                for (var e : info.getBrokerAddrTable().entrySet()) {
                    String addr = e.getValue().getBrokerAddrs().get(0L);
                    if (addr != null) {
                        brokerName = e.getKey();
                        brokerAddr = addr;
                        return;
                    }
                }
            } catch (Exception e) {
                // Not registered yet.
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no broker registered with " + ns);
            }
            Thread.sleep(200);
        }
    }

    static String topic(String base) {
        return base + tag;
    }

    static String group(String base) {
        return "G_" + base + tag;
    }

    /** Creates `topic` with `queues` read and write queues and waits until it is routed. */
    static String createTopic(String base, int queues) throws Exception {
        String t = topic(base);
        TopicConfig tc = new TopicConfig(t);
        tc.setReadQueueNums(queues);
        tc.setWriteQueueNums(queues);
        tc.setPerm(6);
        admin.createAndUpdateTopicConfig(brokerAddr, tc);
        waitRoute(t);
        return t;
    }

    static void waitRoute(String t) throws Exception {
        await("route of " + t, 30_000, () -> {
            try {
                var r = admin.examineTopicRouteInfo(t);
                return r != null && !r.getQueueDatas().isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
    }

    static boolean await(String what, long timeoutMs, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                System.err.println("gave up waiting for " + what);
                return false;
            }
            Thread.sleep(50);
        }
        return true;
    }

    static <T extends ClientConfig> T fast(T c, String instance) {
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance + tag);
        // Routes are polled every second (default 30 s), so a topic the broker creates while
        // the client runs (a retry or dead-letter topic) is found as soon as it exists.
        c.setPollNameServerInterval(1000);
        return c;
    }

    static DefaultMQProducer producer(String base) throws MQClientException {
        DefaultMQProducer p = fast(new DefaultMQProducer("P_" + base + tag), "p-" + base);
        p.setSendMsgTimeout(5000);
        p.start();
        closers.add(p::shutdown);
        return p;
    }

    static void closeAll() {
        List<Runnable> cs = new ArrayList<>(closers);
        closers.clear();
        Collections.reverse(cs);
        for (Runnable r : cs) {
            try {
                r.run();
            } catch (Throwable e) {
                System.err.println("shutdown: " + e);
            }
        }
    }

    /** The messages a push consumer got, in arrival order. */
    static final class Got {
        final List<MessageExt> msgs = new CopyOnWriteArrayList<>();

        /** Waits until every one of `bodies` arrived, then a little longer for more. */
        boolean awaitBodies(List<String> bodies, long timeoutMs) throws InterruptedException {
            boolean ok = Diff.await(bodies.toString(), timeoutMs, () -> bodies().containsAll(bodies));
            Thread.sleep(300);
            return ok;
        }

        boolean await(int n, long timeoutMs) throws InterruptedException {
            boolean ok = Diff.await(n + " messages", timeoutMs, () -> msgs.size() >= n);
            // Anything more than expected that is on its way arrives too, and shows.
            Thread.sleep(300);
            return ok;
        }

        List<String> lines(boolean withQueue) {
            List<String> l = new ArrayList<>();
            for (MessageExt m : msgs) {
                l.addAll(msg(m, withQueue));
            }
            Collections.sort(l);
            return l;
        }

        List<String> bodies() {
            List<String> l = new ArrayList<>();
            for (MessageExt m : msgs) {
                l.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            Collections.sort(l);
            return l;
        }
    }

    static DefaultMQPushConsumer pushConsumer(String groupBase, String instance) {
        DefaultMQPushConsumer c = fast(new DefaultMQPushConsumer(group(groupBase)), instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        closers.add(c::shutdown);
        return c;
    }

    /** A started push consumer of `topic` (expression `sub`) from the first offset. */
    static Got consume(String groupBase, String t, String sub) throws Exception {
        DefaultMQPushConsumer c = pushConsumer(groupBase, "c-" + groupBase);
        c.subscribe(t, sub);
        Got got = new Got();
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            got.msgs.addAll(list);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        owns(c, t);
        return got;
    }

    /**
     * Waits until the push consumer holds every queue of `t` (its group's only member), so
     * that what it gets does not depend on how soon its first rebalance ran.
     */
    static void owns(DefaultMQPushConsumer c, String t) throws InterruptedException {
        int queues;
        try {
            queues = c.fetchSubscribeMessageQueues(t).size();
        } catch (MQClientException e) {
            System.err.println("no queues of " + t + ": " + e);
            return;
        }
        await("queues of " + t, 20_000, () -> owned(c, t) >= queues);
    }

    static void printGot(String s, String prefix, Got got, int expected, long timeoutMs, boolean withQueue)
            throws InterruptedException {
        got.await(expected, timeoutMs);
        say(s, prefix + " count=" + got.msgs.size());
        for (String l : got.lines(withQueue)) {
            say(s, prefix + " " + l);
        }
    }

    static Message message(String t, String tags, String keys, String body) {
        Message m = new Message(t, tags, keys, body.getBytes(StandardCharsets.UTF_8));
        return m;
    }

    static String sent(SendResult r) {
        return "status=" + r.getSendStatus();
    }

    // ---------------------------------------------------------------- scenarios

    static void sendSync(String s) throws Exception {
        String t = createTopic("Sync", 4);
        Got got = consume("sync", t, "*");
        DefaultMQProducer p = producer("sync");
        for (int i = 0; i < 3; i++) {
            say(s, "send#" + i + " " + sent(p.send(message(t, "TagS", "ks" + i, "sync-" + i))));
        }
        printGot(s, "recv", got, 3, 20_000, false);
    }

    static void sendAsync(String s) throws Exception {
        String t = createTopic("Async", 4);
        Got got = consume("async", t, "*");
        DefaultMQProducer p = producer("async");
        List<String> results = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(3);
        for (int i = 0; i < 3; i++) {
            final int n = i;
            p.send(message(t, "TagA", "ka" + i, "async-" + i), new SendCallback() {
                public void onSuccess(SendResult r) {
                    results.add("callback#" + n + " " + sent(r));
                    done.countDown();
                }

                public void onException(Throwable e) {
                    results.add("callback#" + n + " failed " + describe(e));
                    done.countDown();
                }
            });
        }
        say(s, "callbacks all=" + done.await(20, TimeUnit.SECONDS));
        List<String> sorted = new ArrayList<>(results);
        Collections.sort(sorted);
        for (String r : sorted) {
            say(s, r);
        }
        printGot(s, "recv", got, 3, 20_000, false);
    }

    static void sendOneway(String s) throws Exception {
        String t = createTopic("Oneway", 4);
        Got got = consume("oneway", t, "*");
        DefaultMQProducer p = producer("oneway");
        for (int i = 0; i < 3; i++) {
            p.sendOneway(message(t, "TagO", null, "oneway-" + i));
        }
        printGot(s, "recv", got, 3, 20_000, false);
    }

    static void sendBatch(String s) throws Exception {
        String t = createTopic("Batch", 4);
        Got got = consume("batch", t, "*");
        DefaultMQProducer p = producer("batch");
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            batch.add(message(t, "TagB", "kb" + i, "batch-" + i));
        }
        SendResult r = p.send(batch);
        say(s, "batch " + sent(r) + " ids=" + r.getMsgId().split(",").length);
        printGot(s, "recv", got, 3, 20_000, false);
    }

    static void sendQueue(String s) throws Exception {
        String t = createTopic("Queue", 4);
        Got got = consume("queue", t, "*");
        DefaultMQProducer p = producer("queue");
        for (int i = 0; i < 2; i++) {
            SendResult r = p.send(message(t, null, null, "to-q2-" + i), new MessageQueue(t, brokerName, 2));
            say(s, "to-queue#" + i + " " + sent(r) + " qid=" + r.getMessageQueue().getQueueId()
                    + " offset=" + r.getQueueOffset());
        }
        for (int i = 0; i < 2; i++) {
            SendResult r = p.send(message(t, null, null, "selected-" + i),
                    (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), 3);
            say(s, "selector#" + i + " " + sent(r) + " qid=" + r.getMessageQueue().getQueueId()
                    + " offset=" + r.getQueueOffset());
        }
        printGot(s, "recv", got, 4, 20_000, true);
    }

    static void ordered(String s) throws Exception {
        String t = createTopic("Ordered", 4);
        DefaultMQPushConsumer c = pushConsumer("ordered", "c-ordered");
        c.subscribe(t, "*");
        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        List<MessageExt> all = new CopyOnWriteArrayList<>();
        c.registerMessageListener((MessageListenerOrderly) (list, ctx) -> {
            for (MessageExt m : list) {
                seen.computeIfAbsent(m.getKeys(), k -> new CopyOnWriteArrayList<>())
                        .add(new String(m.getBody(), StandardCharsets.UTF_8));
                all.add(m);
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        DefaultMQProducer p = producer("ordered");
        for (int i = 0; i < 10; i++) {
            String key = i % 2 == 0 ? "A" : "B";
            SendResult r = p.send(message(t, "TagO", key, key + "-" + (i / 2)),
                    (mqs, m, arg) -> mqs.get(Math.abs(arg.hashCode()) % mqs.size()), key);
            if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                say(s, "send#" + i + " " + sent(r));
            }
        }
        await("10 ordered", 30_000, () -> all.size() >= 10);
        Thread.sleep(300);
        say(s, "count=" + all.size());
        for (String k : new TreeSet<>(seen.keySet())) {
            say(s, "order " + k + "=" + seen.get(k));
        }
        List<String> props = new ArrayList<>();
        for (MessageExt m : all) {
            props.addAll(msg(m, false));
        }
        Collections.sort(props);
        for (String l : props) {
            if (l.startsWith("body=A-0 ")) {
                say(s, "recv " + l);
            }
        }
    }

    static void tagFilter(String s) throws Exception {
        String t = createTopic("Tags", 4);
        Got ac = consume("tags-ac", t, "TagA || TagC");
        Got b = consume("tags-b", t, "TagB");
        DefaultMQProducer p = producer("tags");
        for (String tg : new String[] {"TagA", "TagB", "TagC", "TagD"}) {
            for (int i = 0; i < 2; i++) {
                p.send(message(t, tg, null, tg + "-" + i));
            }
        }
        ac.await(4, 20_000);
        b.await(2, 20_000);
        say(s, "TagA||TagC got " + ac.bodies());
        say(s, "TagB got " + b.bodies());
    }

    static void sqlFilter(String s) throws Exception {
        String t = createTopic("Sql", 4);
        String[][] exprs = {
            {"a > 4", "2"},
            {"a BETWEEN 2 AND 4", "3"},
            {"b IS NULL", "4"},
            {"c IN ('x', 'y')", "4"},
            {"TAGS = 'T1' AND a < 4", "2"},
            {"b = 'yes' OR a = 6", "3"},
            {"c <> 'z' AND NOT (a >= 3)", "1"},
        };
        List<Got> gots = new ArrayList<>();
        for (int i = 0; i < exprs.length; i++) {
            DefaultMQPushConsumer c = pushConsumer("sql" + i, "c-sql" + i);
            try {
                c.subscribe(t, MessageSelector.bySql(exprs[i][0]));
                Got got = new Got();
                c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                    got.msgs.addAll(list);
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                gots.add(got);
            } catch (MQClientException e) {
                say(s, "subscribe [" + exprs[i][0] + "] failed " + describe(e));
                gots.add(null);
            }
        }
        DefaultMQProducer p = producer("sql");
        String[] cs = {"x", "y", "z"};
        for (int i = 1; i <= 6; i++) {
            Message m = message(t, i % 2 == 0 ? "T2" : "T1", null, "sql-" + i);
            m.putUserProperty("a", String.valueOf(i));
            m.putUserProperty("c", cs[i % 3]);
            if (i <= 2) {
                m.putUserProperty("b", "yes");
            }
            p.send(m);
        }
        for (int i = 0; i < exprs.length; i++) {
            Got got = gots.get(i);
            if (got == null) {
                continue;
            }
            got.await(Integer.parseInt(exprs[i][1]), 20_000);
            say(s, "[" + exprs[i][0] + "] got " + got.bodies());
        }
    }

    static void keysIds(String s) throws Exception {
        String t = createTopic("Keys", 4);
        DefaultMQProducer p = producer("keys");
        List<SendResult> rs = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Message m = message(t, "TagK", null, "keyed-" + i);
            m.setKeys(List.of("key-" + i + tag, "common" + tag));
            rs.add(p.send(m));
        }
        for (String key : new String[] {"key-0", "common"}) {
            List<String> found = new ArrayList<>();
            String k = key + tag;
            await("key " + key, 15_000, () -> {
                try {
                    var q = admin.queryMessage(t, k, 32, 0, Long.MAX_VALUE);
                    found.clear();
                    for (MessageExt m : q.getMessageList()) {
                        found.add(new String(m.getBody(), StandardCharsets.UTF_8));
                    }
                    return found.size() >= (key.equals("common") ? 2 : 1);
                } catch (Exception e) {
                    return false;
                }
            });
            Collections.sort(found);
            say(s, "byKey " + key + " -> " + found);
        }
        for (int i = 0; i < rs.size(); i++) {
            SendResult r = rs.get(i);
            try {
                MessageExt m = admin.viewMessage(t, r.getMsgId());
                for (String l : msg(m, false)) {
                    say(s, "byUniqId#" + i + " " + l);
                }
            } catch (Exception e) {
                say(s, "byUniqId#" + i + " failed " + describe(e));
            }
            try {
                MessageExt m = admin.viewMessage(t, r.getOffsetMsgId());
                say(s, "byOffsetId#" + i + " -> " + new String(m.getBody(), StandardCharsets.UTF_8));
            } catch (Exception e) {
                say(s, "byOffsetId#" + i + " failed " + describe(e));
            }
        }
    }

    /** Waits for `got`, then says for each message whether it came no earlier than asked. */
    static void printDelayed(String s, Got got, int n, Map<String, Long> notBefore) throws InterruptedException {
        printGot(s, "recv", got, n, 30_000, true);
        Map<String, Long> arrived = new TreeMap<>();
        for (MessageExt m : got.msgs) {
            arrived.put(new String(m.getBody(), StandardCharsets.UTF_8), System.currentTimeMillis());
        }
        for (Map.Entry<String, Long> e : new TreeMap<>(notBefore).entrySet()) {
            say(s, e.getKey() + " delivered=" + arrived.containsKey(e.getKey()));
        }
    }

    static void delayLevel(String s) throws Exception {
        String t = createTopic("Delay", 4);
        Map<String, Long> when = new ConcurrentHashMap<>();
        Got got = new Got();
        DefaultMQPushConsumer c = pushConsumer("delay", "c-delay");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            for (MessageExt m : list) {
                when.put(new String(m.getBody(), StandardCharsets.UTF_8), System.currentTimeMillis());
            }
            got.msgs.addAll(list);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        owns(c, t);
        DefaultMQProducer p = producer("delay");
        Map<String, Long> sentAt = new TreeMap<>();
        int[] levels = {1, 2};
        long[] delays = {1000, 5000};
        for (int i = 0; i < levels.length; i++) {
            Message m = message(t, "TagD", "kd" + i, "level-" + levels[i]);
            m.setDelayTimeLevel(levels[i]);
            sentAt.put("level-" + levels[i], System.currentTimeMillis());
            SendResult r = p.send(m, new MessageQueue(t, brokerName, 1));
            say(s, "send level " + levels[i] + " " + sent(r));
        }
        printGot(s, "recv", got, 2, 30_000, true);
        for (int i = 0; i < levels.length; i++) {
            String b = "level-" + levels[i];
            Long at = when.get(b);
            say(s, b + " waited>=" + (delays[i] * 9 / 10) + "ms: "
                    + (at != null && at - sentAt.get(b) >= delays[i] * 9 / 10));
        }
    }

    static void timer(String s) throws Exception {
        String t = createTopic("Timer", 4);
        Map<String, Long> when = new ConcurrentHashMap<>();
        Got got = new Got();
        DefaultMQPushConsumer c = pushConsumer("timer", "c-timer");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            for (MessageExt m : list) {
                when.put(new String(m.getBody(), StandardCharsets.UTF_8), System.currentTimeMillis());
            }
            got.msgs.addAll(list);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        owns(c, t);
        DefaultMQProducer p = producer("timer");
        long now = System.currentTimeMillis();
        Message a = message(t, "TagT", null, "delay-ms");
        MessageAccessor.putProperty(a, "TIMER_DELAY_MS", "2000");
        say(s, "send TIMER_DELAY_MS " + sent(p.send(a, new MessageQueue(t, brokerName, 0))));
        Message b = message(t, "TagT", null, "deliver-ms");
        MessageAccessor.putProperty(b, "TIMER_DELIVER_MS", String.valueOf(now + 3000));
        say(s, "send TIMER_DELIVER_MS " + sent(p.send(b, new MessageQueue(t, brokerName, 0))));
        // Ten days: beyond the broker's maximum (timerMaxDelaySec, 3 days by default).
        long tenDaysMs = 10L * 24 * 3600 * 1000;
        p.setRetryTimesWhenSendFailed(0);
        Message far = message(t, "TagT", null, "too-far-delay");
        MessageAccessor.putProperty(far, "TIMER_DELAY_MS", String.valueOf(tenDaysMs));
        try {
            say(s, "send TIMER_DELAY_MS beyond the maximum " + sent(p.send(far, new MessageQueue(t, brokerName, 0))));
        } catch (Exception e) {
            say(s, "send TIMER_DELAY_MS beyond the maximum failed " + describe(e));
        }
        Message farAt = message(t, "TagT", null, "too-far-deliver");
        MessageAccessor.putProperty(farAt, "TIMER_DELIVER_MS", String.valueOf(now + tenDaysMs));
        try {
            say(s, "send TIMER_DELIVER_MS beyond the maximum " + sent(p.send(farAt, new MessageQueue(t, brokerName, 0))));
        } catch (Exception e) {
            say(s, "send TIMER_DELIVER_MS beyond the maximum failed " + describe(e));
        }
        // Apache RocketMQ delivers these two after their times; whatever else arrives by then
        // shows too.
        got.awaitBodies(List.of("delay-ms", "deliver-ms"), 30_000);
        printGot(s, "recv", got, 0, 0, true);
        Long da = when.get("delay-ms");
        Long db = when.get("deliver-ms");
        say(s, "delay-ms waited>=1800ms: " + (da != null && da - now >= 1800));
        say(s, "deliver-ms waited>=2700ms: " + (db != null && db - now >= 2700));
    }

    static void transaction(String s) throws Exception {
        String t = createTopic("Tx", 4);
        Got got = consume("tx", t, "*");
        Set<String> checked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = fast(new TransactionMQProducer("P_tx" + tag), "p-tx");
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                switch (new String(m.getBody(), StandardCharsets.UTF_8)) {
                    case "commit":
                        return LocalTransactionState.COMMIT_MESSAGE;
                    case "rollback":
                        return LocalTransactionState.ROLLBACK_MESSAGE;
                    default:
                        return LocalTransactionState.UNKNOW;
                }
            }

            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                checked.add(body);
                return body.equals("unknown-then-rollback")
                        ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        closers.add(p::shutdown);
        for (String b : new String[] {"commit", "rollback", "unknown-then-commit", "unknown-then-rollback"}) {
            TransactionSendResult r = p.sendMessageInTransaction(message(t, "TagX", "kx-" + b, b), null);
            say(s, "send " + b + " " + sent(r) + " local=" + r.getLocalTransactionState());
        }
        await("check-backs", 40_000, () -> checked.size() >= 2);
        printGot(s, "recv", got, 2, 30_000, false);
        say(s, "checked " + new TreeSet<>(checked));
    }

    static void broadcast(String s) throws Exception {
        String t = createTopic("Bcast", 4);
        List<Got> members = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            DefaultMQPushConsumer c = pushConsumer("bcast", "c-bcast-" + i);
            broadcasting(c);
            c.subscribe(t, "*");
            Got got = new Got();
            c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                got.msgs.addAll(list);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            members.add(got);
        }
        DefaultMQProducer p = producer("bcast");
        for (int i = 0; i < 4; i++) {
            p.send(message(t, "TagC", null, "bcast-" + i));
        }
        for (int i = 0; i < members.size(); i++) {
            members.get(i).await(4, 20_000);
            say(s, "member" + i + " got " + members.get(i).bodies());
        }
    }

    /** setMessageModel(BROADCASTING): MessageModel's package differs between 4.9 and 5.x. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void broadcasting(DefaultMQPushConsumer c) throws Exception {
        for (var m : c.getClass().getMethods()) {
            if (m.getName().equals("setMessageModel")) {
                m.invoke(c, Enum.valueOf((Class) m.getParameterTypes()[0], "BROADCASTING"));
                return;
            }
        }
        throw new IllegalStateException("no setMessageModel");
    }

    /** How many queues of `t` the member holds (its retry topic's queue does not count). */
    static int owned(DefaultMQPushConsumer c, String t) {
        int n = 0;
        for (var e : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
            if (e.getKey().getTopic().equals(t) && !e.getValue().isDropped()) {
                n++;
            }
        }
        return n;
    }

    static void rebalance(String s) throws Exception {
        String t = createTopic("Rebal", 4);
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        List<Got> gots = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            DefaultMQPushConsumer c = pushConsumer("rebal", "c-rebal-" + i);
            c.subscribe(t, "*");
            Got got = new Got();
            c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                got.msgs.addAll(list);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
            gots.add(got);
        }
        boolean split = await("2+2 queues", 30_000, () -> owned(cs.get(0), t) == 2 && owned(cs.get(1), t) == 2);
        say(s, "queues split 2+2: " + split);
        DefaultMQProducer p = producer("rebal");
        for (int i = 0; i < 8; i++) {
            p.send(message(t, null, null, "rebal-" + i), new MessageQueue(t, brokerName, i % 4));
        }
        await("8 in all", 20_000, () -> gots.get(0).msgs.size() + gots.get(1).msgs.size() >= 8);
        Thread.sleep(300);
        Set<String> union = new TreeSet<>(gots.get(0).bodies());
        Set<String> both = new TreeSet<>(gots.get(0).bodies());
        union.addAll(gots.get(1).bodies());
        both.retainAll(gots.get(1).bodies());
        say(s, "union=" + union.size() + " both=" + both.size() + " each=" + gots.get(0).msgs.size()
                + "+" + gots.get(1).msgs.size());
    }

    static void retryDlq(String s) throws Exception {
        String t = createTopic("Retry", 4);
        String g = group("retry");
        DefaultMQPushConsumer c = pushConsumer("retry", "c-retry");
        c.subscribe(t, "*");
        c.setMaxReconsumeTimes(1);
        Got attempts = new Got();
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            attempts.msgs.addAll(list);
            // Level 1 (1 s) rather than the broker's choice (3 + reconsume times: 10 s and more).
            ctx.setDelayLevelWhenNextConsume(1);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        DefaultMQProducer p = producer("retry");
        say(s, "send " + sent(p.send(message(t, "TagR", "kr", "fail-always"))));
        printGot(s, "attempt", attempts, 2, 30_000, false);
        String dlq = "%DLQ%" + g;
        boolean routed = await("DLQ route", 20_000, () -> {
            try {
                return !admin.examineTopicRouteInfo(dlq).getQueueDatas().isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
        if (routed) {
            var qd = admin.examineTopicRouteInfo(dlq).getQueueDatas().get(0);
            say(s, "dlq route read=" + qd.getReadQueueNums() + " write=" + qd.getWriteQueueNums()
                    + " perm=" + qd.getPerm());
        } else {
            say(s, "dlq route none");
        }
        Got dead = consume("dlq-reader", dlq, "*");
        printGot(s, "dlq", dead, 1, 20_000, false);
    }

    static void offsetReset(String s) throws Exception {
        String t = createTopic("Reset", 4);
        DefaultMQProducer p = producer("reset");
        for (int i = 0; i < 3; i++) {
            p.send(message(t, null, null, "reset-" + i));
        }
        DefaultMQPushConsumer c = pushConsumer("reset", "c-reset");
        c.subscribe(t, "*");
        Got first = new Got();
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            first.msgs.addAll(list);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        first.await(3, 20_000);
        say(s, "first pass got " + first.bodies());
        // shutdown() commits the group's offsets, one way: the reset must come after them.
        c.shutdown();
        boolean committed = await("committed offsets", 15_000, () -> committed(t, group("reset")) == 3);
        say(s, "offsets committed: " + committed);
        if (!committed) {
            try {
                admin.examineConsumeStats(group("reset"));
            } catch (Exception e) {
                say(s, "consume stats failed " + describe(e));
            }
        }
        try {
            Map<MessageQueue, Long> r = admin.resetOffsetByTimestamp(t, group("reset"), 0, true);
            Map<Integer, Long> byQueue = new TreeMap<>();
            for (Map.Entry<MessageQueue, Long> e : r.entrySet()) {
                byQueue.put(e.getKey().getQueueId(), e.getValue());
            }
            say(s, "reset to time 0 -> " + byQueue);
        } catch (Exception e) {
            say(s, "reset to time 0 failed " + describe(e));
        }
        say(s, "committed after the reset: " + committed(t, group("reset")));
        DefaultMQPushConsumer again = pushConsumer("reset", "c-reset-2");
        again.subscribe(t, "*");
        Got second = new Got();
        again.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            second.msgs.addAll(list);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        again.start();
        second.await(3, 15_000);
        say(s, "after the reset got " + second.bodies());
    }

    /** The sum of the group's committed offsets on `t` (-1 when the broker cannot say). */
    static long committed(String t, String g) {
        try {
            long sum = 0;
            for (var e : admin.examineConsumeStats(g).getOffsetTable().entrySet()) {
                if (e.getKey().getTopic().equals(t)) {
                    sum += Math.max(0, e.getValue().getConsumerOffset());
                }
            }
            return sum;
        } catch (Exception e) {
            return -1;
        }
    }

    static void startPositions(String s) throws Exception {
        String t = createTopic("Start", 4);
        DefaultMQProducer p = producer("start");
        for (int i = 0; i < 3; i++) {
            p.send(message(t, null, null, "old-" + i), new MessageQueue(t, brokerName, i % 4));
        }
        // CONSUME_FROM_TIMESTAMP takes seconds (yyyyMMddHHmmss): the old messages must be in an
        // earlier second than the timestamp, the new ones in a later one.
        Thread.sleep(1100);
        String stamp = new SimpleDateFormat("yyyyMMddHHmmss").format(new Date());
        Thread.sleep(1100);
        ConsumeFromWhere[] wheres = {
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
        };
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        List<Got> gots = new ArrayList<>();
        for (ConsumeFromWhere w : wheres) {
            DefaultMQPushConsumer c = pushConsumer("start-" + w.name(), "c-start-" + w.name());
            c.setConsumeFromWhere(w);
            c.setConsumeTimestamp(stamp);
            c.subscribe(t, "*");
            Got got = new Got();
            c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                got.msgs.addAll(list);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
            gots.add(got);
        }
        // A queue enters the table once the client has computed where it starts.
        await("every group owns its queues", 30_000, () -> cs.stream().allMatch(c -> owned(c, t) == 4));
        for (int i = 0; i < 2; i++) {
            p.send(message(t, null, null, "new-" + i), new MessageQueue(t, brokerName, i % 4));
        }
        for (int i = 0; i < wheres.length; i++) {
            Got got = gots.get(i);
            await("new ones", 15_000, () -> got.bodies().containsAll(List.of("new-0", "new-1")));
            Thread.sleep(300);
            say(s, wheres[i].name() + " got " + got.bodies());
        }
    }

    static void litePull(String s) throws Exception {
        String t = createTopic("Lite", 4);
        DefaultMQProducer p = producer("lite");
        for (int i = 0; i < 4; i++) {
            p.send(message(t, "TagL", null, "lite-" + i), new MessageQueue(t, brokerName, i % 4));
        }
        DefaultLitePullConsumer sub = fast(new DefaultLitePullConsumer(group("lite-sub")), "c-lite-sub");
        sub.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        sub.subscribe(t, "*");
        sub.start();
        closers.add(sub::shutdown);
        say(s, "subscribe got " + pollAll(sub, 4));

        DefaultLitePullConsumer assign = fast(new DefaultLitePullConsumer(group("lite-assign")), "c-lite-assign");
        assign.start();
        closers.add(assign::shutdown);
        var mqs = new ArrayList<>(assign.fetchMessageQueues(t));
        assign.assign(mqs);
        for (MessageQueue mq : mqs) {
            assign.seekToBegin(mq);
        }
        say(s, "assign+seekToBegin got " + pollAll(assign, 4));
        MessageQueue q2 = new MessageQueue(t, brokerName, 2);
        assign.seek(q2, 0);
        List<String> again = pollAll(assign, 1);
        say(s, "seek queue 2 to 0 got " + again);
    }

    static List<String> pollAll(DefaultLitePullConsumer c, int n) throws InterruptedException {
        List<String> bodies = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20_000;
        while (bodies.size() < n && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(500)) {
                bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
        }
        // Anything more than expected that is on its way shows too.
        for (MessageExt m : c.poll(300)) {
            bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
        }
        Collections.sort(bodies);
        return bodies;
    }

    static Object call(Object target, String method, Object... args) throws Exception {
        for (var m : target.getClass().getMethods()) {
            if (m.getName().equals(method) && m.getParameterCount() == args.length) {
                try {
                    return m.invoke(target, args);
                } catch (java.lang.reflect.InvocationTargetException e) {
                    if (e.getCause() instanceof Exception) {
                        throw (Exception) e.getCause();
                    }
                    throw e;
                }
            }
        }
        return "no method " + method;
    }

    static void adminConfigs(String s) throws Exception {
        String t = topic("Admin");
        TopicConfig tc = new TopicConfig(t);
        tc.setReadQueueNums(3);
        tc.setWriteQueueNums(3);
        tc.setPerm(6);
        // RocketMQ 5's topic attributes (TopicConfig.setAttributes does not exist in 4.9).
        Object set = call(tc, "setAttributes", new java.util.HashMap<>(Map.of("+message.type", "NORMAL")));
        say(s, "client has topic attributes: " + (set == null));
        admin.createAndUpdateTopicConfig(brokerAddr, tc);
        waitRoute(t);
        try {
            var got = admin.examineTopicConfig(brokerAddr, t);
            say(s, "topic config read=" + got.getReadQueueNums() + " write=" + got.getWriteQueueNums()
                    + " perm=" + got.getPerm() + " order=" + got.isOrder()
                    + " attributes=" + call(got, "getAttributes"));
        } catch (Exception e) {
            say(s, "topic config failed " + describe(e));
        }
        DefaultMQProducer p = producer("admin");
        for (int i = 0; i < 2; i++) {
            p.send(message(t, null, null, "admin-" + i), new MessageQueue(t, brokerName, 1));
        }
        Got got = consume("admin", t, "*");
        got.await(2, 20_000);
        try {
            var stats = admin.examineTopicStats(t);
            long max = 0;
            for (var e : stats.getOffsetTable().values()) {
                max += e.getMaxOffset();
            }
            say(s, "topic stats queues=" + stats.getOffsetTable().size() + " max offsets sum=" + max);
        } catch (Exception e) {
            say(s, "topic stats failed " + describe(e));
        }
        try {
            var sg = admin.examineSubscriptionGroupConfig(brokerAddr, group("admin"));
            if (sg == null) {
                say(s, "subscription group config null");
            } else {
                say(s, "subscription group consumeEnable=" + sg.isConsumeEnable() + " broadcast="
                        + sg.isConsumeBroadcastEnable() + " retryQueues=" + sg.getRetryQueueNums()
                        + " retryMax=" + sg.getRetryMaxTimes() + " fromMinEnable=" + sg.isConsumeFromMinEnable());
            }
        } catch (Exception e) {
            say(s, "subscription group config failed " + describe(e));
        }
    }

    static void unknownTopic(String s) throws Exception {
        DefaultMQProducer p = producer("unknown");
        long t0 = System.currentTimeMillis();
        try {
            say(s, "send " + sent(p.send(message(topic("NoSuchTopic"), null, null, "nowhere"))));
        } catch (Exception e) {
            say(s, "send failed " + describe(e));
        }
        long took = System.currentTimeMillis() - t0;
        say(s, "answered within 2 s: " + (took < 2000));
    }

    static void orderlyLeave(String s) throws Exception {
        String t = createTopic("Leave", 4);
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        List<Got> gots = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            DefaultMQPushConsumer c = pushConsumer("leave", "c-leave-" + i);
            c.subscribe(t, "*");
            Got got = new Got();
            c.registerMessageListener((MessageListenerOrderly) (list, ctx) -> {
                got.msgs.addAll(list);
                return ConsumeOrderlyStatus.SUCCESS;
            });
            c.start();
            cs.add(c);
            gots.add(got);
        }
        DefaultMQProducer p = producer("leave");
        boolean split = await("2+2 queues", 30_000, () -> owned(cs.get(0), t) == 2 && owned(cs.get(1), t) == 2);
        say(s, "queues split 2+2: " + split);
        // Every queue has been consumed from and committed before the second member leaves.
        for (int i = 0; i < 4; i++) {
            p.send(message(t, null, null, "before-" + i), new MessageQueue(t, brokerName, i));
        }
        await("4 before", 20_000, () -> gots.get(0).msgs.size() + gots.get(1).msgs.size() >= 4);
        cs.get(1).shutdown();
        long left = System.currentTimeMillis();
        for (int i = 0; i < 4; i++) {
            p.send(message(t, null, null, "after-" + i), new MessageQueue(t, brokerName, i));
        }
        Got stays = gots.get(0);
        boolean all = await("the remaining member takes over", 25_000,
                () -> stays.bodies().containsAll(List.of("after-0", "after-1", "after-2", "after-3")));
        long took = System.currentTimeMillis() - left;
        say(s, "remaining member got all 4 later messages: " + all + ", within 10 s: " + (all && took < 10_000));
    }
}
