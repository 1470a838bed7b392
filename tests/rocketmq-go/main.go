// An unchanged application of the real Go RocketMQ client (apache/rocketmq-client-go/v2,
// remoting protocol): a producer sends COUNT single messages (SendSync, with tags and keys)
// and one batch of 10, then a push consumer of a new group, consuming from the first
// offset, must receive every one of them within a bounded time.
//
// Usage: rocketmq-go NAMESRV [TOPIC [COUNT [GROUP]]]. Prints one line per step (SENT,
// RECEIVED n of m, WRONG for a message whose tag or keys differ from those sent, then ALL
// RECEIVED or MISSING); exits 0 only when every message sent was received as it was sent, 1 when some were not, 2 on a client error.
//
// With ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY set, the producer and the consumer sign
// every request with them (RocketMQ ACL 1.0, the client's own credentials option), as an
// application configured for an ACL-enabled cluster does.
//
// Against remoting/examples/capture_server.rs it also serves to capture the client's frames
// (`rocketmq-go 127.0.0.1:19876 TopicTest 1`).
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	ns := "127.0.0.1:19876"
	topic := "TopicTest"
	count := 3
	group := "GoRoundtripGroup"
	if len(os.Args) > 1 {
		ns = os.Args[1]
	}
	if len(os.Args) > 2 {
		topic = os.Args[2]
	}
	if len(os.Args) > 3 {
		n, err := strconv.Atoi(os.Args[3])
		must(err)
		count = n
	}
	if len(os.Args) > 4 {
		group = os.Args[4]
	}
	rlog.SetLogLevel("error")

	popts := []producer.Option{
		producer.WithNameServer([]string{ns}),
		producer.WithGroupName("GoRoundtripProducer"),
		producer.WithInstanceName("roundtrip-producer"),
		producer.WithRetry(2),
	}
	copts := []consumer.Option{
		consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName(group),
		consumer.WithInstance("roundtrip-consumer"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}
	if ak := os.Getenv("ROCKETMQ_ACCESS_KEY"); ak != "" {
		creds := primitive.Credentials{AccessKey: ak, SecretKey: os.Getenv("ROCKETMQ_SECRET_KEY")}
		popts = append(popts, producer.WithCredentials(creds))
		copts = append(copts, consumer.WithCredentials(creds))
	}
	p, err := rocketmq.NewProducer(popts...)
	must(err)
	must(p.Start())

	sent := map[string]bool{}
	// body -> the tag and keys it was sent with
	expect := map[string][2]string{}
	queues := map[primitive.MessageQueue]bool{}
	for i := 0; i < count; i++ {
		body := fmt.Sprintf("single-%d", i)
		m := primitive.NewMessage(topic, []byte(body))
		tag := "TagB"
		if i%2 == 0 {
			tag = "TagA"
		}
		key := fmt.Sprintf("key-%d", i)
		m.WithTag(tag)
		m.WithKeys([]string{key})
		expect[body] = [2]string{tag, key}
		r, err := p.SendSync(context.Background(), m)
		must(err)
		if r.Status != primitive.SendOK {
			fmt.Println("SEND FAILED", r.String())
			os.Exit(2)
		}
		sent[body] = true
		queues[*r.MessageQueue] = true
	}
	batch := make([]*primitive.Message, 0, 10)
	for i := 0; i < 10; i++ {
		body := fmt.Sprintf("batch-%d", i)
		m := primitive.NewMessage(topic, []byte(body))
		m.WithTag("TagC")
		expect[body] = [2]string{"TagC", ""}
		batch = append(batch, m)
		sent[body] = true
	}
	br, err := p.SendSync(context.Background(), batch...)
	must(err)
	batchStatus := "SEND_OK"
	if br.Status != primitive.SendOK {
		batchStatus = fmt.Sprintf("status %d", br.Status)
	}
	fmt.Printf("SENT %d to %d queues, batch %s\n", len(sent), len(queues), batchStatus)

	var mu sync.Mutex
	received := map[string]bool{}
	var wrong []string
	c, err := rocketmq.NewPushConsumer(copts...)
	must(err)
	sel := consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	must(c.Subscribe(topic, sel, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			body := string(m.Body)
			if want := expect[body]; want != [2]string{m.GetTags(), m.GetKeys()} {
				wrong = append(wrong, fmt.Sprintf("%s: tag %q keys %q, want %q", body, m.GetTags(), m.GetKeys(), want))
			}
			received[body] = true
		}
		return consumer.ConsumeSuccess, nil
	}))
	must(c.Start())

	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for b := range sent {
			if !received[b] {
				out = append(out, b)
			}
		}
		sort.Strings(out)
		return out
	}
	deadline := time.Now().Add(40 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	miss := missing()
	mu.Lock()
	got := 0
	for b := range received {
		if sent[b] {
			got++
		}
	}
	mu.Unlock()
	if len(miss) == 0 {
		fmt.Printf("RECEIVED %d of %d\n", got, len(sent))
	} else {
		fmt.Printf("RECEIVED %d of %d missing %v\n", got, len(sent), miss)
	}
	mu.Lock()
	for _, w := range wrong {
		fmt.Println("WRONG", w)
	}
	bad := len(wrong) > 0
	mu.Unlock()
	_ = c.Shutdown()
	_ = p.Shutdown()
	if bad {
		os.Exit(1)
	}
	if len(miss) == 0 {
		fmt.Println("ALL RECEIVED")
		os.Exit(0)
	}
	fmt.Println("MISSING", len(miss))
	os.Exit(1)
}

func must(err error) {
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
}
