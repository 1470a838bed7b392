package corvus.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Reads, on every line of its standard input, a topic's stored messages (the sum of its
 * queues' max offsets, as mqadmin's topicStatus shows them, over every broker of its route)
 * together with the servers' CPU time, so that a load tool that does not count them itself
 * (RocketMQ's benchmark Producer and its siblings) can be measured over an exact window.
 *
 * Usage: Sampler NAMESRV TOPIC PID[,PID...]
 * Prints "READY" once connected, then for each input line
 * "SAMPLE epoch_ms stored_messages cpu_ticks": the CPU ticks are the mean of readings taken
 * just before and just after the offsets were asked for.
 */
public final class Sampler {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Sampler NAMESRV TOPIC PID[,PID...]");
            System.exit(2);
        }
        String topic = args[1];
        String[] pids = args[2].split(",");
        DefaultMQAdminExt admin = new DefaultMQAdminExt(5000);
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("sampler-" + System.nanoTime());
        admin.start();
        // Warm the route, the connection and the JIT before the first sample counts.
        stored(admin, topic);
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            long before = Window.cpuTicks(pids);
            long ms = System.currentTimeMillis();
            long stored = stored(admin, topic);
            long after = Window.cpuTicks(pids);
            System.out.printf("SAMPLE %d %d %.1f%n", ms, stored, (before + after) / 2.0);
            System.out.flush();
        }
        admin.shutdown();
        System.exit(0);
    }

    private static long stored(DefaultMQAdminExt admin, String topic) throws Exception {
        TopicStatsTable table = admin.examineTopicStats(topic);
        long sum = 0;
        for (TopicOffset o : table.getOffsetTable().values()) {
            sum += o.getMaxOffset();
        }
        return sum;
    }
}
