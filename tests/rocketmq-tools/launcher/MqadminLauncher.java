import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * Runs RocketMQ's own mqadmin ({@code MQAdminStartup.main}, whichever version is on the
 * classpath) unchanged, without the idle seconds at the end of every command.
 *
 * <p>Every mqadmin command shuts its client down, and that shutdown waits up to three seconds
 * for the client's event thread, which polls its queue every three seconds before it sees the
 * stop; after the command returns, the JVM waits two more seconds for Netty's event loops to
 * end their quiet period. Nothing is sent or printed in that time. The launcher runs the
 * command on a thread of its own; while that thread is inside
 * {@code NettyRemotingClient.shutdown} it interrupts the event thread's poll (the thread then
 * sees the stop, as it would three seconds later), and once the command has returned it
 * flushes the output and ends the JVM with status 0, as the tool's own exit would.
 */
public final class MqadminLauncher {
    private static final String STARTUP = "org.apache.rocketmq.tools.command.MQAdminStartup";
    private static final String CLIENT = "org.apache.rocketmq.remoting.netty.NettyRemotingClient";
    private static final String EVENT_THREAD = "NettyEventExecutor";

    public static void main(String[] args) throws Exception {
        Method main = Class.forName(STARTUP).getMethod("main", String[].class);
        Thread command = new Thread(() -> {
            try {
                main.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                e.getCause().printStackTrace();
            } catch (IllegalAccessException e) {
                e.printStackTrace();
            }
        }, "mqadmin-command");
        command.start();
        while (command.isAlive()) {
            command.join(10);
            if (closingAClient(command)) {
                for (Thread t : Thread.getAllStackTraces().keySet()) {
                    if (t.getName().startsWith(EVENT_THREAD)) {
                        t.interrupt();
                    }
                }
            }
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(0);
    }

    private static boolean closingAClient(Thread command) {
        for (StackTraceElement frame : command.getStackTrace()) {
            if (frame.getClassName().equals(CLIENT) && frame.getMethodName().equals("shutdown")) {
                return true;
            }
        }
        return false;
    }
}
