package capture;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Drives a real RocketMQ 4.9.x Java client against the remoting crate's capture server
 * (remoting/examples/capture_server.rs) on loopback: one send, one batch send, then a push
 * consumer that must receive all three messages. Exits 0 only if everything round-tripped.
 */
public class Capture {
    public static void main(String[] args) throws Exception {
        String ns = args.length > 0 ? args[0] : "127.0.0.1:19876";

        DefaultMQProducer producer = new DefaultMQProducer("CaptureProducerGroup");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("capture-producer");
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();

        Message one = new Message("TopicTest", "TagA", "key1 key2",
            "hello corvus".getBytes(StandardCharsets.UTF_8));
        SendResult r = producer.send(one);
        System.out.println("SEND " + r.getSendStatus() + " offsetMsgId=" + r.getOffsetMsgId()
            + " queue=" + r.getMessageQueue().getQueueId() + " queueOffset=" + r.getQueueOffset());

        List<Message> batch = new ArrayList<>();
        batch.add(new Message("TopicTest", "TagB", "batch one".getBytes(StandardCharsets.UTF_8)));
        batch.add(new Message("TopicTest", "TagB", "batch two".getBytes(StandardCharsets.UTF_8)));
        SendResult br = producer.send(batch);
        System.out.println("BATCH " + br.getSendStatus() + " offsetMsgId=" + br.getOffsetMsgId());

        final CountDownLatch received = new CountDownLatch(3);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("CaptureConsumerGroup");
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("capture-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe("TopicTest", "TagA || TagB");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                System.out.println("RECV topic=" + m.getTopic() + " tags=" + m.getTags()
                    + " keys=" + m.getKeys() + " body=" + new String(m.getBody(), StandardCharsets.UTF_8)
                    + " queue=" + m.getQueueId() + " queueOffset=" + m.getQueueOffset()
                    + " commitLogOffset=" + m.getCommitLogOffset() + " storeHost=" + m.getStoreHost());
                received.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean ok = received.await(20, TimeUnit.SECONDS);
        System.out.println(ok ? "ALL RECEIVED" : "MISSING " + received.getCount());
        consumer.shutdown();
        producer.shutdown();
        System.exit(ok ? 0 : 1);
    }
}
