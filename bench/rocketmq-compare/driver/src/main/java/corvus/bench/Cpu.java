package corvus.bench;

import java.nio.file.Files;
import java.nio.file.Paths;

/** CPU time of processes, from /proc. */
final class Cpu {
    private Cpu() {}

    /** utime+stime of every thread of the processes, in clock ticks (USER_HZ, 100 on Linux). */
    static long ticks(String... pids) throws Exception {
        long sum = 0;
        for (String pid : pids) {
            String s = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")));
            // Fields after the command name in parentheses: state is field 3; utime 14, stime 15.
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            sum += Long.parseLong(f[11]) + Long.parseLong(f[12]);
        }
        return sum;
    }
}
