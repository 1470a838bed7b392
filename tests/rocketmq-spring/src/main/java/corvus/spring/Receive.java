package corvus.spring;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * A Spring Boot application as the rocketmq-spring-boot-starter's documentation writes one:
 * RocketMQTemplate.syncSend sends COUNT messages to TOPIC, then RocketMQTemplate.receive (the
 * starter's DefaultLitePullConsumer, configured by rocketmq.pull-consumer.*) reads until it has
 * them all or 60 s have passed.
 *
 * <p>Usage: {@code Receive NAMESRV TOPIC COUNT}. Prints "SENT n", "RECEIVED body" for each
 * message, then "RECEIVED ALL n" and exits 0, or "MISSING ..." and exits 1.
 */
@SpringBootApplication
public class Receive {
    public static void main(String[] args) {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        ConfigurableApplicationContext ctx = new SpringApplicationBuilder(Receive.class)
                .web(WebApplicationType.NONE)
                .properties(
                        "rocketmq.name-server=" + ns,
                        "rocketmq.producer.group=spring-producer",
                        "rocketmq.pull-consumer.group=spring-receiver",
                        "rocketmq.pull-consumer.topic=" + topic,
                        "spring.main.banner-mode=off")
                .run();
        int status = 1;
        try {
            RocketMQTemplate template = ctx.getBean(RocketMQTemplate.class);
            List<String> want = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String body = "spring-" + i;
                SendResult r = template.syncSend(topic, body);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    System.out.println("SEND FAILED " + r);
                    return;
                }
                want.add(body);
            }
            System.out.println("SENT " + count);
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (!got.containsAll(want) && System.currentTimeMillis() < deadline) {
                List<String> batch = template.receive(String.class, 1000);
                for (String b : batch) {
                    System.out.println("RECEIVED " + b);
                    got.add(b);
                }
            }
            Collections.sort(got);
            if (got.containsAll(want)) {
                System.out.println("RECEIVED ALL " + got.size());
                status = 0;
            } else {
                List<String> missing = new ArrayList<>(want);
                missing.removeAll(got);
                System.out.println("MISSING " + missing + " after 60 s");
            }
        } finally {
            ctx.close();
            System.exit(status);
        }
    }
}
