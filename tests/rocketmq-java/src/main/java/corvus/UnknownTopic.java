package corvus;

import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * A send to a topic nobody created, against a cluster that does not create topics on first
 * send: the producer finds no route (neither the topic's nor TBW102's) and fails at once with
 * the client's own "No route info of this topic" (ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
 * 10005), as against Apache RocketMQ.
 *
 * Usage: UnknownTopic NAMESRV TOPIC. Prints REFUSED CODE MESSAGE (the code the exception
 * carries, the first line of its message); exit 0. A send that succeeds prints SENT and exits 1;
 * one that fails otherwise (a timeout) prints FAILED and exits 2.
 */
public class UnknownTopic {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("JavaUnknownTopicProducer");
        producer.setNamesrvAddr(args[0]);
        producer.setInstanceName("unknown-topic");
        // The route lookups count against the send's timeout: room for a slow, shared host.
        producer.setSendMsgTimeout(30000);
        producer.start();
        int code;
        String message;
        try {
            SendResult r = producer.send(new Message(args[1], "x".getBytes(StandardCharsets.UTF_8)));
            System.out.println("SENT " + r.getSendStatus());
            producer.shutdown();
            System.exit(1);
            return;
        } catch (MQClientException e) {
            code = e.getResponseCode();
            message = e.getErrorMessage() != null ? e.getErrorMessage() : String.valueOf(e.getMessage());
        } catch (MQBrokerException e) {
            code = e.getResponseCode();
            message = String.valueOf(e.getErrorMessage());
        } catch (RuntimeException e) {
            // A NameServer that did not answer in time, say: not the answer asked about.
            System.out.println("FAILED " + e);
            producer.shutdown();
            System.exit(2);
            return;
        }
        System.out.println("REFUSED " + code + " " + message.split("\n")[0]);
        producer.shutdown();
        System.exit(0);
    }
}
