package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * SQL92 property filters as a Java application uses them: message i carries the user
 * properties a = i and b = x, y or z (i mod 3). A consumer subscribing with a bad
 * expression must fail to start (the broker refuses it at CHECK_CLIENT_CONFIG); one
 * subscribing with EXPR must get exactly the messages numbered in WANT.
 *
 * Usage: Sql92 NAMESRV TOPIC COUNT GROUP EXPR WANT (WANT: comma-separated numbers).
 * Exits 0 once the good consumer got exactly WANT.
 */
public class Sql92 {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];
        String expr = args[4];
        Set<Integer> want = new TreeSet<>();
        for (String s : args[5].split(",")) {
            if (!s.isEmpty()) {
                want.add(Integer.parseInt(s));
            }
        }

        DefaultMQProducer producer = new DefaultMQProducer("JavaSql92Producer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("sql92-producer");
        producer.start();
        String[] bs = {"x", "y", "z"};
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "TagA", ("m" + i).getBytes(StandardCharsets.UTF_8));
            m.putUserProperty("a", Integer.toString(i));
            m.putUserProperty("b", bs[i % 3]);
            producer.send(m);
        }
        System.out.println("SENT " + count);

        DefaultMQPushConsumer bad = new DefaultMQPushConsumer(group + "-bad");
        bad.setNamesrvAddr(ns);
        bad.setInstanceName("sql92-bad");
        bad.subscribe(topic, MessageSelector.bySql("a >> 1"));
        bad.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        boolean refused = false;
        try {
            bad.start();
        } catch (MQClientException e) {
            refused = true;
            System.out.println("REFUSED " + e.getMessage().replace('\n', ' '));
        }
        bad.shutdown();

        Set<Integer> got = new ConcurrentSkipListSet<>();
        Set<Integer> unexpected = new ConcurrentSkipListSet<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("sql92-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, MessageSelector.bySql(expr));
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                int i = Integer.parseInt(m.getUserProperty("a"));
                got.add(i);
                if (!want.contains(i)) {
                    unexpected.add(i);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!got.equals(want) && unexpected.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        System.out.println("GOT " + got + (unexpected.isEmpty() ? "" : " unexpected " + unexpected));
        consumer.shutdown();
        producer.shutdown();
        boolean ok = refused && got.equals(want) && unexpected.isEmpty();
        System.out.println(ok ? "ALL MATCHED" : "NOT ALL MATCHED");
        System.exit(ok ? 0 : 1);
    }
}
