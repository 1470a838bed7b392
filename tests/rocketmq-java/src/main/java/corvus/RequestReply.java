package corvus;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Request-reply with RocketMQ's own API: a consumer answers each request with
 * MessageUtil.createReplyMessage, sent by its own producer (SEND_REPLY_MESSAGE_V2); the
 * requester's producer.request(msg, timeout) gets each answer, pushed by the broker over its
 * connection (PUSH_REPLY_MESSAGE_TO_CLIENT). A request to a topic nobody consumes ends in
 * RequestTimeoutException. The requester has message trace on (new DefaultMQProducer(group,
 * true)) and so has the consumer: the program prints the msg id of a plain send and of each
 * request answered, whose traces the test then looks up.
 *
 * Usage: RequestReply NAMESRV TOPIC COUNT UNANSWERED_TOPIC. Exits 0 when every request got its
 * reply and the unanswered one timed out.
 */
public class RequestReply {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String unanswered = args[3];

        DefaultMQProducer replier = new DefaultMQProducer("JavaReplier");
        replier.setNamesrvAddr(ns);
        replier.setInstanceName("replier");
        replier.start();

        // Traced too (enableMsgTrace): its SubBefore and SubAfter records of each request.
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("JavaResponders", true);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("responder");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                try {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    Message reply = MessageUtil.createReplyMessage(m,
                        ("re:" + body).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply, 3000);
                    System.out.println("ANSWERED " + m.getMsgId());
                } catch (Exception e) {
                    System.out.println("REPLY FAILED " + e);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer requester = new DefaultMQProducer("JavaRequester", true);
        requester.setNamesrvAddr(ns);
        requester.setInstanceName("requester");
        requester.start();
        int replied = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        for (int i = 0; i < count && System.nanoTime() < deadline; ) {
            String body = "ask-" + i;
            try {
                Message answer = requester.request(
                    new Message(topic, body.getBytes(StandardCharsets.UTF_8)), 10000);
                String got = new String(answer.getBody(), StandardCharsets.UTF_8);
                if (!got.equals("re:" + body)) {
                    System.out.println("WRONG REPLY " + got + " to " + body);
                    System.exit(1);
                }
                replied++;
                i++;
            } catch (RequestTimeoutException e) {
                // The consumer may still be starting (its first rebalance): ask again.
                System.out.println("RETRY " + body + ": " + e.getMessage());
            }
        }
        System.out.println("REPLIED " + replied);

        // The client times the request with System.currentTimeMillis (it subtracts the send's
        // cost, read at millisecond granularity, from the wait), so it may give up a
        // millisecond before the full second on this clock.
        boolean timedOut = false;
        long started = System.nanoTime();
        try {
            Message answer = requester.request(
                new Message(unanswered, "nobody".getBytes(StandardCharsets.UTF_8)), 1000);
            System.out.println("UNEXPECTED ANSWER " + new String(answer.getBody(), StandardCharsets.UTF_8));
        } catch (RequestTimeoutException e) {
            long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
            System.out.println("GAVE UP AFTER " + waited + " ms");
            timedOut = waited >= 990;
        }
        System.out.println(timedOut ? "TIMED OUT" : "DID NOT TIME OUT");

        SendResult traced = requester.send(new Message(unanswered, "TagT", "trace-key",
            "traced".getBytes(StandardCharsets.UTF_8)));
        System.out.println("TRACED " + traced.getMsgId());
        // The trace dispatchers write in the background: give them their flush interval.
        Thread.sleep(1500);
        requester.shutdown();
        consumer.shutdown();
        replier.shutdown();
        System.exit(replied == count && timedOut ? 0 : 1);
    }
}
