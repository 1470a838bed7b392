package corvus.bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;

import org.HdrHistogram.Histogram;
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
 * Every send's round trip goes into a per-thread HdrHistogram (microseconds); only sends that
 * start inside the measured window count. The server's CPU time (utime+stime of every thread
 * of every PID given: broker and Proxy for Apache RocketMQ, the broker for corvus) is read at
 * the window's start and end.
 *
 * Usage: LoadV5 ENDPOINT TOPIC THREADS SIZE WARMUP_S MEASURE_S PID[,PID...]
 * Prints one line per second and, at the end, one line "RESULT {json}" with the keys of Load's.
 */
public final class LoadV5 {
    static volatile boolean measuring = false;
    static volatile boolean stop = false;
    static volatile long windowStartNs;
    static volatile long windowEndNs = Long.MAX_VALUE;
    static final AtomicLong sentOk = new AtomicLong();
    static final AtomicLong sentFailed = new AtomicLong();
    static final AtomicLong consumed = new AtomicLong();
    static final AtomicLong sentTotal = new AtomicLong();
    static final AtomicLong consumedTotal = new AtomicLong();

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int warmup = Integer.parseInt(args[4]);
        int measure = Integer.parseInt(args[5]);
        String[] pids = args[6].split(",");
        String group = "bench_consumer_" + System.nanoTime();
        long hz = 100; // USER_HZ on Linux

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint)
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10))
                .build();

        Histogram consumeLag = new Histogram(3_600_000L, 3); // born -> delivered, ms
        PushConsumer consumer = provider.newPushConsumerBuilder()
                .setClientConfiguration(config)
                .setConsumerGroup(group)
                .setSubscriptionExpressions(
                        Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .setMessageListener(view -> {
                    long now = System.currentTimeMillis();
                    consumedTotal.incrementAndGet();
                    if (measuring) {
                        consumed.incrementAndGet();
                        synchronized (consumeLag) {
                            consumeLag.recordValue(Math.max(0, now - view.getBornTimestamp()));
                        }
                    }
                    return ConsumeResult.SUCCESS;
                })
                .build();

        Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config)
                .setTopics(topic)
                .build();

        byte[] body = new byte[size];
        new Random(42).nextBytes(body);

        List<Histogram> hists = new ArrayList<>();
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Histogram h = new Histogram(60_000_000L, 3);
            hists.add(h);
            Thread t = new Thread(() -> {
                while (!stop) {
                    Message msg = provider.newMessageBuilder().setTopic(topic).setTag("TagA").setBody(body).build();
                    long t0 = System.nanoTime();
                    boolean ok;
                    try {
                        producer.send(msg);
                        ok = true;
                    } catch (Exception e) {
                        ok = false;
                        try {
                            Thread.sleep(10);
                        } catch (InterruptedException ie) {
                            return;
                        }
                    }
                    long t1 = System.nanoTime();
                    if (ok) {
                        sentTotal.incrementAndGet();
                    }
                    if (measuring && t0 >= windowStartNs && t0 < windowEndNs) {
                        if (ok) {
                            sentOk.incrementAndGet();
                            h.recordValue(Math.max(1, (t1 - t0) / 1000));
                        } else {
                            sentFailed.incrementAndGet();
                        }
                    }
                }
            }, "sender-" + i);
            t.setDaemon(true);
            workers.add(t);
        }
        for (Thread t : workers) {
            t.start();
        }

        long start = System.nanoTime();
        long lastSent = 0, lastCons = 0;
        long cpu0 = 0, cpu1 = 0;
        long w0 = 0, w1 = 0;
        for (int s = 1; s <= warmup + measure; s++) {
            long next = start + s * 1_000_000_000L;
            long d;
            while ((d = next - System.nanoTime()) > 0) {
                Thread.sleep(Math.max(1, d / 1_000_000));
            }
            if (s == warmup) {
                cpu0 = Cpu.ticks(pids);
                w0 = System.nanoTime();
                windowStartNs = w0;
                measuring = true;
            }
            long st = sentTotal.get(), ct = consumedTotal.get();
            System.out.printf("t=%ds%s send %d/s consume %d/s%n", s, s > warmup ? " [measured]" : " [warm-up]",
                    st - lastSent, ct - lastCons);
            lastSent = st;
            lastCons = ct;
        }
        w1 = System.nanoTime();
        windowEndNs = w1;
        cpu1 = Cpu.ticks(pids);
        measuring = false;
        stop = true;
        for (Thread t : workers) {
            t.join(15_000);
        }

        double secs = (w1 - w0) / 1e9;
        Histogram all = new Histogram(60_000_000L, 3);
        for (Histogram h : hists) {
            all.add(h);
        }
        long ok = sentOk.get();
        long cons = consumed.get();
        double cpuSec = (cpu1 - cpu0) / (double) hz;
        String json = String.format(
                "{\"threads\":%d,\"size\":%d,\"window_s\":%.2f,\"sent\":%d,\"failed\":%d,"
                        + "\"send_tps\":%.0f,\"rt_p50_us\":%d,\"rt_p99_us\":%d,\"rt_p999_us\":%d,\"rt_max_us\":%d,"
                        + "\"consumed\":%d,\"consume_tps\":%.0f,\"e2e_p50_ms\":%d,\"e2e_p99_ms\":%d,"
                        + "\"broker_cpu_s\":%.2f,\"broker_cpu_util\":%.3f,\"broker_cpu_s_per_M_sent\":%.2f,"
                        + "\"backlog_at_end\":%d,\"server_pids\":%d}",
                threads, size, secs, ok, sentFailed.get(), ok / secs,
                all.getValueAtPercentile(50), all.getValueAtPercentile(99), all.getValueAtPercentile(99.9),
                all.getMaxValue(), cons, cons / secs, consumeLag.getValueAtPercentile(50),
                consumeLag.getValueAtPercentile(99), cpuSec, cpuSec / secs, ok > 0 ? cpuSec / (ok / 1e6) : 0.0,
                sentTotal.get() - consumedTotal.get(), pids.length);
        System.out.println("RESULT " + json);
        producer.close();
        consumer.close();
        System.exit(0);
    }
}
