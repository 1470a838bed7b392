package corvus.bench;

import org.apache.rocketmq.remoting.protocol.body.HARuntimeInfo;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Samples an Apache RocketMQ master's replication status (GET_BROKER_HA_STATUS, what
 * mqadmin's haStatus prints) every INTERVAL_MS for MEASURE_S seconds from BEGIN_EPOCH_MS (the
 * load driver's measured window, wall clock): the master's CommitLog end and the most
 * advanced slave's acknowledged offset.
 *
 * Usage: HaLag NAMESRV BROKER_ADDR INTERVAL_MS BEGIN_EPOCH_MS MEASURE_S
 * Prints one line a sample: "S ms_since_start master_end slave_acked" (ms from a monotonic
 * clock), then "DONE samples errors".
 */
public final class HaLag {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: HaLag NAMESRV BROKER_ADDR INTERVAL_MS BEGIN_EPOCH_MS MEASURE_S");
            System.exit(2);
        }
        String broker = args[1];
        long interval = Long.parseLong(args[2]);
        long beginEpochMs = Long.parseLong(args[3]);
        long measure = Long.parseLong(args[4]);
        DefaultMQAdminExt admin = new DefaultMQAdminExt(5000);
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("halag-" + System.nanoTime());
        admin.start();
        long begin = System.nanoTime() + (beginEpochMs - System.currentTimeMillis()) * 1_000_000L;
        long end = begin + measure * 1_000_000_000L;
        // Warm the connection (and the JIT) before the window opens.
        while (System.nanoTime() < begin) {
            try {
                admin.getBrokerHAStatus(broker);
            } catch (Exception e) {
                // the broker may not be up for HA status yet
            }
            Thread.sleep(interval);
        }
        long samples = 0, errors = 0;
        StringBuilder out = new StringBuilder();
        while (System.nanoTime() < end) {
            try {
                HARuntimeInfo info = admin.getBrokerHAStatus(broker);
                long at = System.nanoTime();
                long acked = -1;
                if (info.getHaConnectionInfo() != null) {
                    for (HARuntimeInfo.HAConnectionRuntimeInfo c : info.getHaConnectionInfo()) {
                        acked = Math.max(acked, c.getSlaveAckOffset());
                    }
                }
                if (acked >= 0) {
                    out.append(String.format("S %.3f %d %d%n", (at - begin) / 1e6,
                            info.getMasterCommitLogMaxOffset(), acked));
                    samples++;
                } else {
                    if (errors++ == 0) {
                        System.err.println("no slave connection in " + info.toJson());
                    }
                }
            } catch (Exception e) {
                if (errors++ == 0) {
                    System.err.println("getBrokerHAStatus: " + e);
                }
            }
            Thread.sleep(interval);
        }
        System.out.print(out);
        System.out.println("DONE " + samples + " " + errors);
        admin.shutdown();
    }
}
