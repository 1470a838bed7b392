package corvus;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * The producers of corvus-bodycheck (tests/src/bin/corvus-bodycheck.rs) as a RocketMQ 4.9
 * application: PRODUCERS threads send for DURATION_MS bodies that carry their own length and
 * a hash of the rest (the same format and sizes; bodies over 4 KiB are zlib-compressed by the
 * client), single sends and batches, with the client's default retries. A corvus-bodycheck
 * run with --producers 0 checks every body served.
 *
 * Usage: BodyCheckLoad NAMESRV TOPIC PRODUCERS DURATION_MS [BODY_BYTES_MAX]. Prints a progress line every 5 s
 * and JAVA LOAD DONE sent S acked A failed F.
 */
public class BodyCheckLoad {
    static final int MAGIC = 0x43425643;
    static final int HEADER = 28;
    static final int[] SIZES = {64, 300, 1000, 3000, 5000, 9000, 16384};

    static long mix(long x) {
        x ^= x >>> 33;
        x *= 0xff51afd7ed558ccdL;
        x ^= x >>> 33;
        return x;
    }

    static long fnv(byte[] b, int from) {
        long h = 0xcbf29ce484222325L;
        for (int i = from; i < b.length; i++) {
            h ^= (b[i] & 0xffL);
            h *= 0x100000001b3L;
        }
        return h;
    }

    static void putLe(byte[] b, int at, long v, int n) {
        for (int i = 0; i < n; i++) {
            b[at + i] = (byte) (v >>> (8 * i));
        }
    }

    static int sizeMax = Integer.MAX_VALUE;

    static byte[] body(int producer, long seq) {
        long r = mix(((long) producer << 40) ^ seq);
        int size = Math.max(HEADER, Math.min(sizeMax, SIZES[(int) Long.remainderUnsigned(r, SIZES.length)]));
        byte[] b = new byte[size];
        byte[] text = "corvus body check payload ".getBytes();
        for (int i = 0; i < size - HEADER; i++) {
            b[HEADER + i] = (i % 64 < 32) ? text[i % text.length] : (byte) (mix(r ^ i) & 0xff);
        }
        long h = fnv(b, HEADER);
        putLe(b, 0, MAGIC, 4);
        putLe(b, 4, size, 4);
        putLe(b, 8, producer, 4);
        putLe(b, 12, seq, 8);
        putLe(b, 20, h, 8);
        return b;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int producers = Integer.parseInt(args[2]);
        long durationMs = Long.parseLong(args[3]);
        if (args.length > 4) {
            sizeMax = Integer.parseInt(args[4]);
        }
        AtomicLong sent = new AtomicLong();
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Map<String, AtomicLong> errors = new ConcurrentHashMap<>();
        long end = System.currentTimeMillis() + durationMs;
        List<Thread> threads = new ArrayList<>();
        for (int p = 0; p < producers; p++) {
            final int id = p;
            Thread t = new Thread(() -> {
                DefaultMQProducer producer = new DefaultMQProducer("BodyCheckJava" + id);
                producer.setNamesrvAddr(ns);
                producer.setInstanceName("bodycheck-" + id);
                producer.setSendMsgTimeout(3000);
                try {
                    producer.start();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
                long seq = 0;
                while (System.currentTimeMillis() < end) {
                    long n = Long.remainderUnsigned(mix(((long) id) ^ (seq << 8)), 4) == 0
                        ? 2 + Long.remainderUnsigned(mix(seq), 15) : 1;
                    sent.addAndGet(n);
                    try {
                        SendResult r;
                        if (n == 1) {
                            r = producer.send(new Message(topic, body(id, seq)));
                        } else {
                            List<Message> batch = new ArrayList<>();
                            for (long s = seq; s < seq + n; s++) {
                                batch.add(new Message(topic, body(id, s)));
                            }
                            r = producer.send(batch);
                        }
                        if (r.getSendStatus() == SendStatus.SEND_OK) {
                            acked.addAndGet(n);
                        } else {
                            failed.addAndGet(n);
                        }
                    } catch (Exception e) {
                        failed.addAndGet(n);
                        String k = String.valueOf(e.getMessage());
                        k = k.substring(0, Math.min(60, k.length()));
                        if (errors.computeIfAbsent(k, x -> new AtomicLong()).incrementAndGet() == 1) {
                            System.out.println("producer " + id + " seq " + seq + ": " + e);
                        }
                        try {
                            Thread.sleep(5);
                        } catch (InterruptedException ie) {
                            return;
                        }
                    }
                    seq += n;
                }
                producer.shutdown();
            });
            t.start();
            threads.add(t);
        }
        long next = System.currentTimeMillis() + 5000;
        for (Thread t : threads) {
            while (t.isAlive()) {
                t.join(500);
                if (System.currentTimeMillis() > next) {
                    next += 5000;
                    System.out.println("sent " + sent.get() + " acked " + acked.get() + " failed " + failed.get());
                }
            }
        }
        for (Map.Entry<String, AtomicLong> e : errors.entrySet()) {
            System.out.println(e.getValue().get() + " x " + e.getKey());
        }
        System.out.println("JAVA LOAD DONE sent " + sent.get() + " acked " + acked.get() + " failed " + failed.get());
    }
}
