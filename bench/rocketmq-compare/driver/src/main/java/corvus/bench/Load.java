package corvus.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;

import org.HdrHistogram.Histogram;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A load driver over RocketMQ's remoting protocol, written after Apache RocketMQ's own
 * benchmark tool (rocketmq-example's org.apache.rocketmq.example.benchmark.Producer and
 * Consumer, which Maven Central does not serve): one DefaultMQProducer shared by N threads,
 * each sending M-byte messages with a synchronous send() in a loop (as the tool does), and a
 * DefaultMQPushConsumer of a new group counting what it receives (default consume threads
 * and pull batch, as the tool's Consumer).
 *
 * Every send's round trip goes into a per-thread HdrHistogram (microseconds); only sends that
 * start inside the measured window count. The broker's CPU time (utime+stime of every
 * thread, from /proc/PID/stat) is read at the window's start and end.
 *
 * Usage: Load NAMESRV TOPIC THREADS SIZE WARMUP_S MEASURE_S BROKER_PID [GROUP]
 * Prints one line per second and, at the end, one line "RESULT {json}".
 */
public final class Load {
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
        String ns = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int warmup = Integer.parseInt(args[4]);
        int measure = Integer.parseInt(args[5]);
        String brokerPid = args[6];
        String group = args.length > 7 ? args[7] : "bench_consumer_" + System.nanoTime();
        long hz = 100; // USER_HZ on Linux

        Histogram consumeLag = new Histogram(3_600_000L, 3); // born -> delivered, ms
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            consumedTotal.addAndGet(msgs.size());
            if (measuring) {
                consumed.addAndGet(msgs.size());
                synchronized (consumeLag) {
                    for (MessageExt m : msgs) {
                        consumeLag.recordValue(Math.max(0, now - m.getBornTimestamp()));
                    }
                }
            }
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

        List<Histogram> hists = new ArrayList<>();
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Histogram h = new Histogram(60_000_000L, 3);
            hists.add(h);
            Thread t = new Thread(() -> {
                while (!stop) {
                    Message msg = new Message(topic, "TagA", body);
                    long t0 = System.nanoTime();
                    boolean ok;
                    try {
                        SendResult r = producer.send(msg);
                        ok = r.getSendStatus() == SendStatus.SEND_OK;
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
                cpu0 = Cpu.ticks(brokerPid);
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
        cpu1 = Cpu.ticks(brokerPid);
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
                        + "\"backlog_at_end\":%d}",
                threads, size, secs, ok, sentFailed.get(), ok / secs,
                all.getValueAtPercentile(50), all.getValueAtPercentile(99), all.getValueAtPercentile(99.9),
                all.getMaxValue(), cons, cons / secs, consumeLag.getValueAtPercentile(50),
                consumeLag.getValueAtPercentile(99), cpuSec, cpuSec / secs, ok > 0 ? cpuSec / (ok / 1e6) : 0.0,
                sentTotal.get() - consumedTotal.get());
        System.out.println("RESULT " + json);
        producer.shutdown();
        consumer.shutdown();
        System.exit(0);
    }
}
