package corvus.bench;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicLong;

import org.HdrHistogram.Histogram;

/**
 * One run of a load driver ({@link Load}, {@code LoadV5}): sender threads that each send in a
 * loop, the deliveries the consumer counts, a line a second through the warm-up and the
 * measured window, the servers' CPU time over that window (utime+stime of every thread of
 * every PID, from /proc/PID/stat) and the closing "RESULT {json}" line.
 *
 * Every send's round trip goes into its thread's HdrHistogram (microseconds); only sends
 * that start inside the measured window count, and only deliveries made in it.
 */
final class Window {
    private static final long USER_HZ = 100;

    private volatile boolean measuring = false;
    private volatile boolean stop = false;
    private volatile long startNs;
    private volatile long endNs = Long.MAX_VALUE;
    private final AtomicLong sentOk = new AtomicLong();
    private final AtomicLong sentFailed = new AtomicLong();
    private final AtomicLong consumed = new AtomicLong();
    private final AtomicLong sentTotal = new AtomicLong();
    private final AtomicLong consumedTotal = new AtomicLong();
    private final Histogram consumeLag = new Histogram(3_600_000L, 3); // born -> delivered, ms
    private final List<Histogram> hists = new ArrayList<>();
    private final List<Thread> senders = new ArrayList<>();
    private double windowS;
    private double cpuS;

    /** utime+stime of every thread of the processes, in clock ticks. */
    static long cpuTicks(String... pids) throws Exception {
        long sum = 0;
        for (String pid : pids) {
            String s = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")));
            // Fields after the command name in parentheses: state is field 3; utime 14, stime 15.
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            sum += Long.parseLong(f[11]) + Long.parseLong(f[12]);
        }
        return sum;
    }

    /** A message delivered now, born at `bornMs`. */
    void delivered(long bornMs) {
        long now = System.currentTimeMillis();
        consumedTotal.incrementAndGet();
        if (measuring) {
            consumed.incrementAndGet();
            synchronized (consumeLag) {
                consumeLag.recordValue(Math.max(0, now - bornMs));
            }
        }
    }

    /** Starts a sender thread calling `send` in a loop until the run ends: true for a send
     * the server took, false or an exception (then a 10 ms pause) for one it did not. */
    void startSender(String name, Callable<Boolean> send) {
        Histogram h = new Histogram(60_000_000L, 3);
        hists.add(h);
        Thread t = new Thread(() -> {
            while (!stop) {
                long t0 = System.nanoTime();
                boolean ok;
                try {
                    ok = send.call();
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
                if (measuring && t0 >= startNs && t0 < endNs) {
                    if (ok) {
                        sentOk.incrementAndGet();
                        h.recordValue(Math.max(1, (t1 - t0) / 1000));
                    } else {
                        sentFailed.incrementAndGet();
                    }
                }
            }
        }, name);
        t.setDaemon(true);
        senders.add(t);
        t.start();
    }

    /** Runs `warmup` seconds, then the `measure` seconds of the window, a line a second; the
     * CPU of `pids` is counted over the window. The senders are stopped at its end. */
    void run(int warmup, int measure, String... pids) throws Exception {
        long start = System.nanoTime();
        long lastSent = 0, lastCons = 0;
        long cpu0 = 0;
        long w0 = 0;
        for (int s = 1; s <= warmup + measure; s++) {
            long next = start + s * 1_000_000_000L;
            long d;
            while ((d = next - System.nanoTime()) > 0) {
                Thread.sleep(Math.max(1, d / 1_000_000));
            }
            if (s == warmup) {
                cpu0 = cpuTicks(pids);
                w0 = System.nanoTime();
                startNs = w0;
                measuring = true;
            }
            long st = sentTotal.get(), ct = consumedTotal.get();
            System.out.printf("t=%ds%s send %d/s consume %d/s%n", s, s > warmup ? " [measured]" : " [warm-up]",
                    st - lastSent, ct - lastCons);
            lastSent = st;
            lastCons = ct;
        }
        long w1 = System.nanoTime();
        endNs = w1;
        long cpu1 = cpuTicks(pids);
        measuring = false;
        stop = true;
        for (Thread t : senders) {
            t.join(15_000);
        }
        windowS = (w1 - w0) / 1e9;
        cpuS = (cpu1 - cpu0) / (double) USER_HZ;
    }

    /** The RESULT line's JSON, with `extra` (",\"key\":value..." or "") at its end. */
    String resultJson(int threads, int size, String extra) {
        Histogram all = new Histogram(60_000_000L, 3);
        for (Histogram h : hists) {
            all.add(h);
        }
        long ok = sentOk.get();
        long cons = consumed.get();
        double secs = windowS;
        return String.format(
                "{\"threads\":%d,\"size\":%d,\"window_s\":%.2f,\"sent\":%d,\"failed\":%d,"
                        + "\"send_tps\":%.0f,\"rt_p50_us\":%d,\"rt_p99_us\":%d,\"rt_p999_us\":%d,\"rt_max_us\":%d,"
                        + "\"consumed\":%d,\"consume_tps\":%.0f,\"e2e_p50_ms\":%d,\"e2e_p99_ms\":%d,"
                        + "\"broker_cpu_s\":%.2f,\"broker_cpu_util\":%.3f,\"broker_cpu_s_per_M_sent\":%.2f,"
                        + "\"backlog_at_end\":%d%s}",
                threads, size, secs, ok, sentFailed.get(), ok / secs,
                all.getValueAtPercentile(50), all.getValueAtPercentile(99), all.getValueAtPercentile(99.9),
                all.getMaxValue(), cons, cons / secs, consumeLag.getValueAtPercentile(50),
                consumeLag.getValueAtPercentile(99), cpuS, cpuS / secs, ok > 0 ? cpuS / (ok / 1e6) : 0.0,
                sentTotal.get() - consumedTotal.get(), extra);
    }
}
