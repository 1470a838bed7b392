package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * RocketMQ ACL 1.0 from an unchanged Java application: a DefaultMQProducer and a
 * DefaultMQPushConsumer with an AclClientRPCHook (AccessKey/SecretKey, every request signed)
 * send COUNT messages to TOPIC and receive them all in GROUP; a send to DENIED_TOPIC, which
 * the account may not publish to, is refused with NO_PERMISSION (16); a producer with the
 * wrong secret key is refused too.
 *
 * Usage: Acl NAMESRV TOPIC DENIED_TOPIC COUNT GROUP ACCESS_KEY SECRET_KEY. Prints SENT n,
 * DENIED TOPIC REFUSED 16, WRONG SECRET REFUSED 16 and RECEIVED n; exits 0 only if all held.
 */
public class Acl {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String denied = args[2];
        int count = Integer.parseInt(args[3]);
        String group = args[4];
        RPCHook hook = new AclClientRPCHook(new SessionCredentials(args[5], args[6]));
        boolean ok = true;

        DefaultMQProducer producer = new DefaultMQProducer("JavaAclProducer", hook);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("acl-producer");
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        int sent = 0;
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "Acl", ("acl-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            if (r.getSendStatus() == SendStatus.SEND_OK) {
                sent++;
            }
        }
        System.out.println("SENT " + sent);
        ok &= sent == count;

        ok &= refused(producer, denied, "DENIED TOPIC");
        producer.shutdown();

        DefaultMQProducer wrong = new DefaultMQProducer("JavaAclWrongProducer",
            new AclClientRPCHook(new SessionCredentials(args[5], args[6] + "-wrong")));
        wrong.setNamesrvAddr(ns);
        wrong.setInstanceName("acl-wrong-producer");
        wrong.setRetryTimesWhenSendFailed(0);
        wrong.start();
        ok &= refused(wrong, topic, "WRONG SECRET");
        wrong.shutdown();

        Set<String> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer =
            new DefaultMQPushConsumer(group, hook, new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("acl-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (received.size() < count && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        consumer.shutdown();
        System.out.println("RECEIVED " + received.size());
        ok &= received.size() == count;
        System.exit(ok ? 0 : 1);
    }

    /** A send that must fail with NO_PERMISSION (16). */
    static boolean refused(DefaultMQProducer p, String topic, String what) {
        try {
            SendResult r = p.send(new Message(topic, "Acl", "x".getBytes(StandardCharsets.UTF_8)));
            System.out.println(what + " ACCEPTED " + r.getSendStatus());
            return false;
        } catch (Exception e) {
            // The client retries NO_PERMISSION as it does other broker codes, then wraps the
            // broker's answer in an MQClientException.
            for (Throwable t = e; t != null; t = t.getCause()) {
                if (t instanceof MQBrokerException) {
                    MQBrokerException b = (MQBrokerException) t;
                    System.out.println(what + " REFUSED " + b.getResponseCode() + " " + b.getErrorMessage());
                    return b.getResponseCode() == 16;
                }
            }
            System.out.println(what + " FAILED OTHERWISE " + e);
            return false;
        }
    }
}
