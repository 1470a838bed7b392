package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A consumer that fails each message once (RECONSUME_LATER): the client sends it back to the
 * broker (CONSUMER_SEND_MSG_BACK) and must get it again from the group's retry topic, with
 * its own topic, body and a reconsume count of 1, and the properties RocketMQ's broker gives
 * the retry: RETRY_TOPIC (the topic), ORIGIN_MESSAGE_ID (the first delivery's offset
 * message id), the delay level it waited (3: 10 s), REAL_TOPIC/REAL_QID (the retry topic
 * and the queue it arrives in) and WAIT=false, and nothing else of its own (no
 * RECONSUME_TIME: the count is the message's reconsume times).
 *
 * Usage: Retry NAMESRV TOPIC COUNT GROUP. Exits 0 once every message came back.
 */
public class Retry {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String group = args[3];

        DefaultMQProducer producer = new DefaultMQProducer("JavaRetryProducer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("retry-producer");
        producer.start();
        for (int i = 0; i < count; i++) {
            producer.send(new Message(topic, "TagA", ("retry-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        System.out.println("SENT " + count);

        Set<String> failed = ConcurrentHashMap.newKeySet();
        Set<String> retried = ConcurrentHashMap.newKeySet();
        Set<String> wrong = ConcurrentHashMap.newKeySet();
        java.util.Map<String, String> firstOffsetIds = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("retry-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                if (m.getReconsumeTimes() == 0) {
                    failed.add(body);
                    firstOffsetIds.put(body, ((org.apache.rocketmq.common.message.MessageClientExt) m).getOffsetMsgId());
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                if (!m.getTopic().equals(topic) || m.getReconsumeTimes() != 1) {
                    wrong.add(body + " topic=" + m.getTopic() + " reconsume=" + m.getReconsumeTimes());
                }
                String retryTopic = "%RETRY%" + group;
                String props = "RETRY_TOPIC=" + m.getProperty("RETRY_TOPIC")
                    + " ORIGIN_MESSAGE_ID=" + m.getProperty("ORIGIN_MESSAGE_ID")
                    + " DELAY=" + m.getProperty("DELAY")
                    + " REAL_TOPIC=" + m.getProperty("REAL_TOPIC")
                    + " REAL_QID=" + m.getProperty("REAL_QID") + " queue=" + m.getQueueId()
                    + " WAIT=" + m.getProperty("WAIT")
                    + " RECONSUME_TIME=" + m.getProperty("RECONSUME_TIME");
                if (!topic.equals(m.getProperty("RETRY_TOPIC"))
                        || m.getProperty("ORIGIN_MESSAGE_ID") == null
                        || !m.getProperty("ORIGIN_MESSAGE_ID").equals(firstOffsetIds.get(body))
                        || m.getDelayTimeLevel() != 3
                        || !retryTopic.equals(m.getProperty("REAL_TOPIC"))
                        || !String.valueOf(m.getQueueId()).equals(m.getProperty("REAL_QID"))
                        || !"false".equals(m.getProperty("WAIT"))
                        || m.getProperty("RECONSUME_TIME") != null) {
                    wrong.add(body + " " + props + " (first offset id " + firstOffsetIds.get(body) + ")");
                }
                retried.add(body);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (retried.size() < count && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        System.out.println("FAILED ONCE " + failed.size() + ", RETRIED " + retried.size()
            + (wrong.isEmpty() ? "" : " wrong " + wrong));
        consumer.shutdown();
        producer.shutdown();
        boolean ok = retried.size() == count && failed.size() == count && wrong.isEmpty();
        System.out.println(ok ? "ALL RETRIED" : "NOT ALL RETRIED");
        System.exit(ok ? 0 : 1);
    }
}
