package corvus;

import java.nio.charset.StandardCharsets;
import java.util.Set;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * ACL 2.0 from an unchanged RocketMQ 5.3.3 remoting application signed as a normal user
 * (AclClientRPCHook: AccessKey = user name, SecretKey = password). Each operation is tried
 * and its outcome printed as one line, "NAME OK" or "NAME REFUSED code":
 *
 * <ul>
 *   <li>SEND_ALLOWED: COUNT sends to TOPIC (the user's policy allows Pub);
 *   <li>SEND_DENIED: a send to DENIED_TOPIC;
 *   <li>SEND_WRONG_PASSWORD: a send to TOPIC signed with a wrong password;
 *   <li>PULL_ALLOWED: pulls of TOPIC's queues as GROUP (Sub on both) find COUNT messages;
 *   <li>PULL_DENIED_GROUP: a pull of TOPIC as DENIED_GROUP;
 *   <li>CREATE_TOPIC: creating a topic (an admin request) at the broker.
 * </ul>
 *
 * <p>Usage: {@code Acl2 NAMESRV TOPIC DENIED_TOPIC GROUP DENIED_GROUP USER PASSWORD COUNT}.
 * Exits 0 once every line is printed.
 */
public class Acl2 {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        String deniedTopic = args[2];
        String group = args[3];
        String deniedGroup = args[4];
        RPCHook hook = new AclClientRPCHook(new SessionCredentials(args[5], args[6]));
        int count = Integer.parseInt(args[7]);

        DefaultMQProducer producer = new DefaultMQProducer("Acl2Producer", hook);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("acl2-producer");
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        String sent = "OK";
        for (int i = 0; i < count; i++) {
            String r = send(producer, topic);
            if (!r.equals("OK")) {
                sent = r;
                break;
            }
        }
        System.out.println("SEND_ALLOWED " + sent);
        System.out.println("SEND_DENIED " + send(producer, deniedTopic));

        String brokerAddr = producer.getDefaultMQProducerImpl().getMqClientFactory()
            .findBrokerAddressInPublish(
                producer.fetchPublishMessageQueues(topic).get(0).getBrokerName());
        String created;
        try {
            TopicConfig cfg = new TopicConfig("Acl2CreatedTopic", 1, 1, 6);
            producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
                .createTopic(brokerAddr, "TBW102", cfg, 5000);
            created = "OK";
        } catch (Exception e) {
            created = outcome(e);
        }
        System.out.println("CREATE_TOPIC " + created);
        producer.shutdown();

        DefaultMQProducer wrong = new DefaultMQProducer("Acl2WrongProducer",
            new AclClientRPCHook(new SessionCredentials(args[5], args[6] + "-wrong")));
        wrong.setNamesrvAddr(ns);
        wrong.setInstanceName("acl2-wrong-producer");
        wrong.setRetryTimesWhenSendFailed(0);
        wrong.start();
        System.out.println("SEND_WRONG_PASSWORD " + send(wrong, topic));
        wrong.shutdown();

        System.out.println("PULL_ALLOWED " + pull(ns, group, hook, topic, count));
        System.out.println("PULL_DENIED_GROUP " + pull(ns, deniedGroup, hook, topic, count));
        System.exit(0);
    }

    /** One send: OK, or what refused it. */
    static String send(DefaultMQProducer p, String topic) {
        try {
            SendResult r = p.send(new Message(topic, "Acl2", "x".getBytes(StandardCharsets.UTF_8)));
            return r.getSendStatus() == SendStatus.SEND_OK ? "OK" : "STATUS " + r.getSendStatus();
        } catch (Exception e) {
            return outcome(e);
        }
    }

    /** Pulls every queue of TOPIC from offset 0 as GROUP: OK when COUNT messages came. */
    static String pull(String ns, String group, RPCHook hook, String topic, int count) {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook);
        c.setNamesrvAddr(ns);
        c.setInstanceName("acl2-" + group);
        try {
            c.start();
            Set<MessageQueue> queues = c.fetchSubscribeMessageQueues(topic);
            int found = 0;
            for (MessageQueue q : queues) {
                PullResult r = c.pull(q, "*", 0, 64);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    found += r.getMsgFoundList().size();
                }
            }
            return found == count ? "OK" : "FOUND " + found;
        } catch (Exception e) {
            return outcome(e);
        } finally {
            c.shutdown();
        }
    }

    /** "REFUSED code remark" for a broker's refusal, else what else happened. */
    static String outcome(Exception e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof MQBrokerException) {
                MQBrokerException b = (MQBrokerException) t;
                return "REFUSED " + b.getResponseCode() + " " + b.getErrorMessage();
            }
            // Admin calls wrap the broker's answer in an MQClientException with its code.
            if (t instanceof MQClientException && ((MQClientException) t).getResponseCode() > 0) {
                MQClientException c = (MQClientException) t;
                return "REFUSED " + c.getResponseCode() + " " + c.getErrorMessage();
            }
        }
        return "FAILED " + e;
    }
}
