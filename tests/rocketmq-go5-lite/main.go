// Lite Topics (RocketMQ 5.5) through RocketMQ 5's gRPC SDK for Go
// (github.com/apache/rocketmq-clients/golang/v5 v5.1.4, the first Go release with
// Message.SetLiteTopic and LitePushConsumer), the Go side of tests/rocketmq-v52's
// corvus.v52.Lite, with the same modes and output lines:
//
//	lite send ENDPOINT TOPIC LITES N
//	    sends N messages to each lite topic of LITES (comma-separated), the lite topics in
//	    turn; body "LITE#K"; prints SENT LITE#K per acknowledged send
//	lite consume ENDPOINT TOPIC GROUP LITES TOTAL [FAIL_ONCE]
//	    a LitePushConsumer subscribes each lite topic of LITES and consumes until TOTAL
//	    distinct messages succeeded; prints RECEIVED LITE#K lite=L attempt=A per delivery, in
//	    the order the listener saw them; the first delivery of FAIL_ONCE (a body) fails once.
//	    Then it unsubscribes the first lite topic of LITES.
//
// Ends with "OK" and exit 0, or "FAILED cause" and exit 1. Waits are bounded.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

const consumeLimit = 90 * time.Second

func config(endpoint, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      endpoint,
		ConsumerGroup: group,
		// The SDK signs every request and needs credentials; without ACL they are empty.
		Credentials: &credentials.SessionCredentials{},
	}
}

func send(endpoint, topic string, lites []string, n int) error {
	p, err := rmq.NewProducer(config(endpoint, ""), rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.GracefulStop()
	for k := 0; k < n; k++ {
		for _, lite := range lites {
			body := lite + "#" + strconv.Itoa(k)
			msg := &rmq.Message{Topic: topic, Body: []byte(body)}
			msg.SetKeys("key-" + body)
			msg.SetLiteTopic(lite)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			receipts, err := p.Send(ctx, msg)
			cancel()
			if err != nil {
				return fmt.Errorf("send %s: %w", body, err)
			}
			if len(receipts) == 0 || receipts[0].MessageID == "" {
				return fmt.Errorf("no message id for %s", body)
			}
			fmt.Println("SENT " + body)
		}
	}
	return nil
}

func consume(endpoint, topic, group string, lites []string, total int, failOnce string) error {
	var mu sync.Mutex
	done := map[string]bool{}
	failed := map[string]bool{}
	bad := false
	listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		body := string(mv.GetBody())
		lite := mv.GetLiteTopic()
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("RECEIVED %s lite=%s attempt=%d\n", body, lite, mv.GetDeliveryAttempt())
		if !strings.HasPrefix(body, lite+"#") {
			bad = true
		}
		if body == failOnce && !failed[body] {
			failed[body] = true
			return rmq.FAILURE
		}
		done[body] = true
		return rmq.SUCCESS
	}}
	c, err := rmq.NewLitePushConsumer(config(endpoint, group),
		rmq.NewLitePushConsumerConfig(topic, 30*time.Second),
		rmq.WithPushAwaitDuration(3*time.Second),
		rmq.WithPushMessageListener(listener),
	)
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	defer c.GracefulStop()
	for _, lite := range lites {
		if err := c.SubscribeLite(lite); err != nil {
			return fmt.Errorf("subscribe %s: %w", lite, err)
		}
	}
	deadline := time.Now().Add(consumeLimit)
	for {
		mu.Lock()
		n := len(done)
		mu.Unlock()
		if n >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(done) < total {
		got := make([]string, 0, len(done))
		for b := range done {
			got = append(got, b)
		}
		sort.Strings(got)
		return fmt.Errorf("consumed %d of %d: %v", len(done), total, got)
	}
	if bad {
		return errors.New("a message came with another lite topic than its own")
	}
	return c.UnSubscribeLite(lites[0])
}

func run(args []string) error {
	switch args[0] {
	case "send":
		n, err := strconv.Atoi(args[4])
		if err != nil {
			return err
		}
		return send(args[1], args[2], strings.Split(args[3], ","), n)
	case "consume":
		if len(args) < 6 {
			return errors.New("consume needs ENDPOINT TOPIC GROUP LITES TOTAL")
		}
		total, err := strconv.Atoi(args[5])
		if err != nil {
			return err
		}
		failOnce := ""
		if len(args) > 6 {
			failOnce = args[6]
		}
		return consume(args[1], args[2], args[3], strings.Split(args[4], ","), total, failOnce)
	default:
		return fmt.Errorf("unknown mode %s", args[0])
	}
}

func main() {
	args := os.Args[1:]
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: lite send ENDPOINT TOPIC LITES N | consume ENDPOINT TOPIC GROUP LITES TOTAL [FAIL_ONCE]")
		os.Exit(2)
	}
	// Plaintext: the SDK dials TLS unless told otherwise.
	rmq.EnableSsl = false
	if err := run(args); err != nil {
		fmt.Println("FAILED " + err.Error())
		os.Exit(1)
	}
	fmt.Println("OK")
	// The SDK's goroutines may outlive GracefulStop: leave at once with the verdict.
	os.Exit(0)
}
