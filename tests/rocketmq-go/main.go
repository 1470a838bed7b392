// Drives the real Go RocketMQ client (apache/rocketmq-client-go/v2, remoting protocol)
// against remoting/examples/capture_server.rs on loopback: one send, one batch send, then a
// push consumer that must receive all three messages. Exits 0 only if they round-tripped.
package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	ns := "127.0.0.1:19876"
	if len(os.Args) > 1 {
		ns = os.Args[1]
	}
	rlog.SetLogLevel("error")
	p, err := rocketmq.NewProducer(
		producer.WithNameServer([]string{ns}),
		producer.WithGroupName("GoCaptureProducerGroup"),
		producer.WithRetry(0),
	)
	must(err)
	must(p.Start())
	msg := primitive.NewMessage("TopicTest", []byte("hello from go"))
	msg.WithTag("TagA")
	msg.WithKeys([]string{"key1", "key2"})
	r, err := p.SendSync(context.Background(), msg)
	must(err)
	fmt.Println("SEND", r.Status, r.OffsetMsgID, r.QueueOffset)
	b1 := primitive.NewMessage("TopicTest", []byte("go batch one"))
	b1.WithTag("TagB")
	b2 := primitive.NewMessage("TopicTest", []byte("go batch two"))
	b2.WithTag("TagB")
	r, err = p.SendSync(context.Background(), b1, b2)
	must(err)
	fmt.Println("BATCH", r.Status, r.OffsetMsgID, r.QueueOffset)

	var got int32
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("GoCaptureConsumerGroup"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	must(err)
	sel := consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagB"}
	must(c.Subscribe("TopicTest", sel, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			fmt.Println("RECV", m.Topic, m.GetTags(), m.GetKeys(), string(m.Body), m.OffsetMsgId, m.QueueOffset)
			atomic.AddInt32(&got, 1)
		}
		return consumer.ConsumeSuccess, nil
	}))
	must(c.Start())
	deadline := time.Now().Add(20 * time.Second)
	for atomic.LoadInt32(&got) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	ok := atomic.LoadInt32(&got) >= 3
	_ = c.Shutdown()
	_ = p.Shutdown()
	if ok {
		fmt.Println("ALL RECEIVED")
		os.Exit(0)
	}
	fmt.Println("MISSING", 3-atomic.LoadInt32(&got))
	os.Exit(1)
}

func must(err error) {
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
}
