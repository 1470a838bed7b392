// RocketMQ 5's gRPC SDK for Go (github.com/apache/rocketmq-clients/golang/v5) scenarios against
// one gRPC endpoint (Apache's Proxy, or a broker that serves apache.rocketmq.v2.MessagingService
// itself): the scenarios, topics, groups and transcript lines of the Java program
// (tests/rocketmq-v5, corvus.v5.Scenarios) for those the Go SDK can run.
//
// Usage: scenarios ENDPOINT SCENARIO [--tls] [--topic T] [--group G]
//
// Each scenario prints a deterministic transcript on stdout (no message ids, times or hosts) and
// ends with "OK SCENARIO" and exit 0 when everything it asserts held, or "FAILED SCENARIO: cause"
// and exit 1. Every wait is bounded. Timings and other details that vary go to stderr as "note:"
// lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// topics maps each scenario to its topic and the topic's message type (the harness creates them).
var topics = map[string][2]string{
	"produce":          {"V5Normal", "NORMAL"},
	"fifo":             {"V5Fifo", "FIFO"},
	"delay":            {"V5Delay", "DELAY"},
	"delay-receive":    {"V5DelayRecv", "DELAY"},
	"transaction-send": {"V5TxnSend", "TRANSACTION"},
	"transaction":      {"V5Txn", "TRANSACTION"},
	"simple":           {"V5Simple", "NORMAL"},
	"share":            {"V5Share", "NORMAL"},
}

const (
	// await is the receive's long-polling wait (the SDK's awaitDuration).
	await = 3 * time.Second
	// invisible is the smallest invisible duration Apache's Proxy accepts on receive.
	invisible = 10 * time.Second
	// codeMessageNotFound is the status of a receive that found nothing (apache.rocketmq.v2.Code).
	codeMessageNotFound = 40401
)

// failure is an assertion that did not hold, or an SDK error.
type failure struct{ what string }

func (f failure) Error() string { return f.what }

func say(line string) {
	fmt.Println(line)
}

func note(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "note: "+format+"\n", args...)
}

func check(cond bool, format string, args ...any) {
	if !cond {
		panic(failure{fmt.Sprintf(format, args...)})
	}
}

func must(err error, format string, args ...any) {
	if err != nil {
		panic(failure{fmt.Sprintf(format, args...) + ": " + err.Error()})
	}
}

// waitUntil waits until cond holds, at most limit; false if it never did.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

type scenarios struct {
	endpoint string
	topic    string
	group    string
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: scenarios ENDPOINT SCENARIO [--tls] [--topic T] [--group G]")
		names := make([]string, 0, len(topics))
		for k := range topics {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(os.Stderr, "  %s %s %s\n", k, topics[k][0], topics[k][1])
		}
		os.Exit(2)
	}
	endpoint, scenario := os.Args[1], os.Args[2]
	fixed, ok := topics[scenario]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown scenario "+scenario)
		os.Exit(2)
	}
	tls := false
	topic, group := fixed[0], ""
	for i := 3; i < len(os.Args); i++ {
		switch {
		case os.Args[i] == "--tls":
			tls = true
		case os.Args[i] == "--topic" && i+1 < len(os.Args):
			i++
			topic = os.Args[i]
		case os.Args[i] == "--group" && i+1 < len(os.Args):
			i++
			group = os.Args[i]
		default:
			fmt.Fprintln(os.Stderr, "unknown option "+os.Args[i])
			os.Exit(2)
		}
	}
	if group == "" {
		group = topic + "Group"
	}
	setUpSDK(tls)

	started := time.Now()
	status := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				say(fmt.Sprintf("FAILED %s: %v", scenario, r))
				status = 1
			}
		}()
		s := &scenarios{endpoint: endpoint, topic: topic, group: group}
		switch scenario {
		case "produce":
			s.produce()
		case "fifo":
			s.fifo()
		case "delay":
			s.delay()
		case "delay-receive":
			s.delayReceive()
		case "transaction-send":
			s.transactionSend()
		case "transaction":
			s.transaction()
		case "simple":
			s.simple()
		case "share":
			s.share()
		}
		say("OK " + scenario)
	}()
	fmt.Fprintf(os.Stderr, "scenario %s took %.1f s\n", scenario, time.Since(started).Seconds())
	os.Exit(status)
}

// setUpSDK points the SDK's log file under $HOME (it defaults to /logs/rocketmqlogs, from a
// "user.home" environment variable that is never set) and, unless tls, makes it dial plaintext.
//
// The Go SDK always dials TLS (credentials.NewTLS of its tls.Config, skip-verify by default), and
// its client manager builds every RPC client with NewRpcClient(target) and no options, so the
// Config's and the ClientOption's connection options never reach the dial. NewRpcClient is an
// exported variable: wrapping it is the one place a plaintext dial can be set, as a gRPC dial
// option placed after the SDK's own transport credentials (the last one wins).
func setUpSDK(tls bool) {
	if os.Getenv("rocketmq.client.logRoot") == "" {
		if home, err := os.UserHomeDir(); err == nil {
			_ = os.Setenv("rocketmq.client.logRoot", filepath.Join(home, "logs", "rocketmqlogs"))
		}
	}
	rmq.ResetLogger()
	if tls {
		return
	}
	sdk := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		plain := rmq.WithRpcClientConnOption(rmq.WithDialOptions(
			grpc.WithTransportCredentials(insecure.NewCredentials())))
		return sdk(target, append(opts, plain)...)
	}
}

func (s *scenarios) config(group string) *rmq.Config {
	// The SDK signs every request and reads the credentials to do so: without an access key it
	// signs with an empty one.
	return &rmq.Config{
		Endpoint:      s.endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{},
	}
}

func (s *scenarios) message(body string) *rmq.Message {
	m := &rmq.Message{Topic: s.topic, Body: []byte(body)}
	m.SetTag("TagA")
	m.SetKeys("key-" + body)
	return m
}

func (s *scenarios) producer(opts ...rmq.ProducerOption) rmq.Producer {
	p, err := rmq.NewProducer(s.config(""), append([]rmq.ProducerOption{rmq.WithTopics(s.topic)}, opts...)...)
	must(err, "new producer")
	must(p.Start(), "start producer")
	return p
}

func (s *scenarios) simpleConsumer(topic, group string) rmq.SimpleConsumer {
	c, err := rmq.NewSimpleConsumer(s.config(group),
		rmq.WithAwaitDuration(await),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	must(err, "new simple consumer")
	must(c.Start(), "start simple consumer")
	return c
}

func stop(c interface{ GracefulStop() error }) {
	if err := c.GracefulStop(); err != nil {
		note("stop: %v", err)
	}
}

func send(p rmq.Producer, m *rmq.Message, body string) {
	r, err := p.Send(context.Background(), m)
	must(err, "send %s", body)
	check(len(r) == 1 && r[0].MessageID != "", "a message id for %s", body)
	say("SENT " + body + " id=yes")
}

func body(m *rmq.MessageView) string {
	return string(m.GetBody())
}

// receive is one receive call; a receive that found nothing (MESSAGE_NOT_FOUND, which the Go SDK
// returns as an error where the Java SDK returns an empty list) is an empty list.
func receive(c rmq.SimpleConsumer, max int32, invisibleDuration time.Duration) []*rmq.MessageView {
	ms, err := c.Receive(context.Background(), max, invisibleDuration)
	var status *rmq.ErrRpcStatus
	if errors.As(err, &status) && status.Code == codeMessageNotFound {
		return nil
	}
	must(err, "receive")
	return ms
}

func ack(c rmq.SimpleConsumer, m *rmq.MessageView) {
	must(c.Ack(context.Background(), m), "ack %s", body(m))
}

// receiveUntil receives from c until done holds or limit passed, handing each message to each;
// false if done never held.
func receiveUntil(c rmq.SimpleConsumer, invisibleDuration, limit time.Duration, done func() bool,
	each func(*rmq.MessageView)) bool {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		for _, m := range receive(c, 16, invisibleDuration) {
			each(m)
		}
	}
	return true
}

// ---- scenarios ----

// produce: three normal messages with tag, keys and body; each receipt has a message id.
func (s *scenarios) produce() {
	p := s.producer()
	defer stop(p)
	for i := 0; i < 3; i++ {
		b := "normal-" + strconv.Itoa(i)
		send(p, s.message(b), b)
	}
}

// fifo: six messages of two message groups, interleaved, to a FIFO topic.
func (s *scenarios) fifo() {
	p := s.producer()
	defer stop(p)
	for i := 0; i < 3; i++ {
		for _, g := range []string{"a", "b"} {
			b := fmt.Sprintf("fifo-%s-%d", g, i)
			m := s.message(b)
			m.SetMessageGroup("group-" + g)
			send(p, m, b)
		}
	}
}

// delay: one message with a delivery timestamp 2 s ahead, to a DELAY topic.
func (s *scenarios) delay() {
	p := s.producer()
	defer stop(p)
	m := s.message("delay-0")
	m.SetDelayTimestamp(time.Now().Add(2 * time.Second))
	send(p, m, "delay-0")
}

// delayReceive: a message due 2 s ahead is received once due, not earlier than its delivery
// timestamp (less 1 s: Apache's timer wheel delivers by the second), and carries that timestamp.
func (s *scenarios) delayReceive() {
	p := s.producer()
	defer stop(p)
	c := s.simpleConsumer(s.topic, s.group)
	defer stop(c)
	due := time.UnixMilli(time.Now().Add(2 * time.Second).UnixMilli())
	m := s.message("delay-1")
	m.SetDelayTimestamp(due)
	send(p, m, "delay-1")
	var got *rmq.MessageView
	var at time.Time
	ok := receiveUntil(c, invisible, 40*time.Second, func() bool { return got != nil }, func(m *rmq.MessageView) {
		at = time.Now()
		got = m
		ack(c, m)
	})
	check(ok, "the delayed message arrived within 40 s")
	note("delay-1 arrived %d ms after its delivery timestamp", at.Sub(due).Milliseconds())
	say(fmt.Sprintf("RECEIVED %s attempt=%d", body(got), got.GetDeliveryAttempt()))
	check(!at.Before(due.Add(-time.Second)), "not early: arrived %d ms before its time", due.Sub(at).Milliseconds())
	say("NOT EARLY")
	ts := got.GetDeliveryTimestamp()
	check(ts != nil && ts.UnixMilli() == due.UnixMilli(), "the delivery timestamp is carried: %v", ts)
	say("DELIVERY TIMESTAMP carried")
}

// checkedSet is the bodies the TransactionChecker was asked about.
type checkedSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (c *checkedSet) add(b string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[b] {
		return false
	}
	c.seen[b] = true
	return true
}

func (c *checkedSet) has(b string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[b]
}

func (c *checkedSet) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := make([]string, 0, len(c.seen))
	for b := range c.seen {
		l = append(l, b)
	}
	sort.Strings(l)
	return "[" + strings.Join(l, ", ") + "]"
}

func (s *scenarios) transactionalProducer(checked *checkedSet) rmq.Producer {
	return s.producer(rmq.WithTransactionChecker(&rmq.TransactionChecker{
		Check: func(view *rmq.MessageView) rmq.TransactionResolution {
			b := body(view)
			if checked.add(b) {
				note("the broker checked %s", b)
			}
			if strings.HasSuffix(b, "-unknown") {
				return rmq.COMMIT
			}
			return rmq.ROLLBACK
		},
	}))
}

func sendInTransaction(p rmq.Producer, m *rmq.Message, b string) rmq.Transaction {
	tx := p.BeginTransaction()
	r, err := p.SendWithTransaction(context.Background(), m, tx)
	must(err, "send %s in a transaction", b)
	check(len(r) == 1 && r[0].MessageID != "", "a message id for %s", b)
	say("SENT " + b + " id=yes")
	return tx
}

// transactionSend: the send side of transactions, one half message committed, one rolled back.
func (s *scenarios) transactionSend() {
	checked := &checkedSet{seen: map[string]bool{}}
	p := s.transactionalProducer(checked)
	defer stop(p)
	must(sendInTransaction(p, s.message("txn-commit"), "txn-commit").Commit(), "commit")
	say("COMMITTED txn-commit")
	must(sendInTransaction(p, s.message("txn-rollback"), "txn-rollback").RollBack(), "roll back")
	say("ROLLED BACK txn-rollback")
}

// transaction: committed, rolled back, and one left open whose check-back the TransactionChecker
// commits; a SimpleConsumer then gets the committed two, never the rolled-back one.
func (s *scenarios) transaction() {
	checked := &checkedSet{seen: map[string]bool{}}
	p := s.transactionalProducer(checked)
	defer stop(p)
	c := s.simpleConsumer(s.topic, s.group)
	defer stop(c)
	must(sendInTransaction(p, s.message("txn-commit"), "txn-commit").Commit(), "commit")
	say("COMMITTED txn-commit")
	must(sendInTransaction(p, s.message("txn-rollback"), "txn-rollback").RollBack(), "roll back")
	say("ROLLED BACK txn-rollback")
	sendInTransaction(p, s.message("txn-unknown"), "txn-unknown")
	say("LEFT OPEN txn-unknown")
	check(waitUntil(60*time.Second, func() bool { return checked.has("txn-unknown") }),
		"the broker checked txn-unknown back within 60 s")
	say("CHECKED txn-unknown -> COMMIT")
	got := map[string]bool{}
	var order []string
	ok := receiveUntil(c, invisible, 60*time.Second, func() bool { return got["txn-commit"] && got["txn-unknown"] },
		func(m *rmq.MessageView) {
			b := body(m)
			if !got[b] {
				order = append(order, b)
			}
			got[b] = true
			ack(c, m)
		})
	check(ok, "the committed messages arrived within 60 s, got %v", order)
	// One more receive past them: the rolled-back message is not there either.
	for _, m := range receive(c, 16, invisible) {
		got[body(m)] = true
		ack(c, m)
	}
	sorted := make([]string, 0, len(got))
	for b := range got {
		sorted = append(sorted, b)
	}
	sort.Strings(sorted)
	say("RECEIVED " + strings.Join(sorted, " "))
	check(!got["txn-rollback"], "the rolled-back message was never delivered")
	say("NEVER txn-rollback")
	check(!checked.has("txn-commit") && !checked.has("txn-rollback"),
		"only the open transaction was checked, checked %v", checked)
}

// simple: receive and ack; a message left unacked comes back after its invisible duration with
// deliveryAttempt 2; changeInvisibleDuration then keeps it away past the first duration, and the
// ack with the handle it returned succeeds.
func (s *scenarios) simple() {
	p := s.producer()
	defer stop(p)
	c := s.simpleConsumer(s.topic, s.group)
	defer stop(c)
	for i := 0; i < 3; i++ {
		b := "simple-" + strconv.Itoa(i)
		send(p, s.message(b), b)
	}
	first := map[string]*rmq.MessageView{}
	var receivedAt time.Time
	ok := receiveUntil(c, invisible, 30*time.Second, func() bool { return len(first) == 3 }, func(m *rmq.MessageView) {
		b := body(m)
		check(first[b] == nil, "no second delivery of %s within its invisible time", b)
		first[b] = m
		if b == "simple-2" {
			receivedAt = time.Now()
		}
	})
	check(ok, "all three received within 30 s, got %d", len(first))
	note("a receipt handle as the server wrote it: %s", first["simple-0"].GetReceiptHandle())
	for _, b := range []string{"simple-0", "simple-1", "simple-2"} {
		m := first[b]
		tag := "-"
		if m.GetTag() != nil {
			tag = *m.GetTag()
		}
		say(fmt.Sprintf("RECEIVED %s attempt=%d tag=%s keys=%s", b, m.GetDeliveryAttempt(), tag,
			strings.Join(m.GetKeys(), ",")))
	}
	ack(c, first["simple-0"])
	ack(c, first["simple-1"])
	say("ACKED simple-0 simple-1")

	// simple-2 is not acked: it comes back once its invisible duration is over.
	var again *rmq.MessageView
	ok = receiveUntil(c, invisible, 60*time.Second, func() bool { return again != nil }, func(m *rmq.MessageView) {
		check(body(m) == "simple-2", "only simple-2 comes back, not %s", body(m))
		again = m
	})
	check(ok, "simple-2 came back within 60 s")
	after := time.Since(receivedAt)
	note("simple-2 came back %d ms after its first receive", after.Milliseconds())
	say(fmt.Sprintf("RECEIVED %s attempt=%d", body(again), again.GetDeliveryAttempt()))
	check(again.GetDeliveryAttempt() == 2, "deliveryAttempt 2 on redelivery")
	check(after >= invisible-time.Second, "not redelivered before its invisible duration: %d ms", after.Milliseconds())
	say("REDELIVERED after the invisible duration")

	// Extended to 25 s: it stays away past the 10 s it was received with.
	extendedAt := time.Now()
	must(c.ChangeInvisibleDuration(again, 25*time.Second), "change the invisible duration")
	say("CHANGED invisible duration of simple-2 to 25s")
	for time.Since(extendedAt) < invisible+5*time.Second {
		l := receive(c, 16, invisible)
		check(len(l) == 0, "nothing delivered while simple-2 is invisible, got %d", len(l))
	}
	say("NOT REDELIVERED within 15s")
	ack(c, again)
	say("ACKED simple-2")
}

// share: two SimpleConsumers of one group; the first takes a batch of at most 3 and keeps it
// invisible, the second gets the rest; both ack in time and no message reaches both.
func (s *scenarios) share() {
	const n = 8
	p := s.producer()
	defer stop(p)
	a := s.simpleConsumer(s.topic, s.group)
	defer stop(a)
	b := s.simpleConsumer(s.topic, s.group)
	defer stop(b)
	for i := 0; i < n; i++ {
		m := "share-" + strconv.Itoa(i)
		send(p, s.message(m), m)
	}
	by := map[string]string{}
	var dup []string
	var firstBatch []*rmq.MessageView
	deadline := time.Now().Add(30 * time.Second)
	for len(firstBatch) == 0 && time.Now().Before(deadline) {
		firstBatch = append(firstBatch, receive(a, 3, 30*time.Second)...)
	}
	check(len(firstBatch) > 0, "the first consumer received within 30 s")
	for _, m := range firstBatch {
		by[body(m)] = "a"
	}
	ok := receiveUntil(b, 30*time.Second, 30*time.Second, func() bool { return len(by) == n }, func(m *rmq.MessageView) {
		if _, seen := by[body(m)]; seen {
			dup = append(dup, body(m))
		} else {
			by[body(m)] = "b"
		}
		ack(b, m)
	})
	for _, m := range firstBatch {
		ack(a, m)
	}
	check(ok, "all %d received within 30 s, got %d", n, len(by))
	// One more receive on each: nothing is left, and nothing comes twice.
	for _, c := range []rmq.SimpleConsumer{a, b} {
		for _, m := range receive(c, 16, invisible) {
			dup = append(dup, body(m))
			ack(c, m)
		}
	}
	onA := 0
	for _, who := range by {
		if who == "a" {
			onA++
		}
	}
	note("first consumer %d, second %d", onA, n-onA)
	both := "no"
	if onA > 0 && onA < n {
		both = "yes"
	}
	say(fmt.Sprintf("SHARED %d distinct=%d duplicates=%d both=%s", n, len(by), len(dup), both))
	check(len(dup) == 0, "no message delivered to both: %v", dup)
	check(onA > 0 && onA < n, "both consumers got some")
}
