#!/usr/bin/env node
// RocketMQ 5's gRPC SDK for Node.js (npm rocketmq-client-nodejs) scenarios against one gRPC
// endpoint (Apache's Proxy, or a broker that serves apache.rocketmq.v2.MessagingService itself).
//
// Usage: node scenarios.js ENDPOINT SCENARIO [--tls] [--topic T] [--group G]
//
// The same scenarios, topics, groups and transcript lines as the Java program
// (tests/rocketmq-v5/src/main/java/corvus/v5/Scenarios.java), so a transcript compares with
// tests/rocketmq-v5/expected/<scenario>.txt. Each scenario prints a deterministic transcript on
// stdout and ends with "OK SCENARIO" and exit 0 when everything it asserts held, or
// "FAILED SCENARIO: cause" and exit 1. Every wait is bounded; nothing sleeps to assert. Timings
// and other details that vary go to stderr as "note:" lines, the SDK's warnings and errors as
// "sdk:" lines.
'use strict';

const util = require('node:util');
const { ConsumeResult, Producer, PushConsumer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

// Scenario -> its topic and the topic's message type (the harness creates them).
const TOPICS = {
  produce: [ 'V5Normal', 'NORMAL' ],
  fifo: [ 'V5Fifo', 'FIFO' ],
  delay: [ 'V5Delay', 'DELAY' ],
  'delay-receive': [ 'V5DelayRecv', 'DELAY' ],
  'transaction-send': [ 'V5TxnSend', 'TRANSACTION' ],
  transaction: [ 'V5Txn', 'TRANSACTION' ],
  simple: [ 'V5Simple', 'NORMAL' ],
  push: [ 'V5Push', 'NORMAL' ],
  'fifo-push': [ 'V5FifoPush', 'FIFO' ],
  share: [ 'V5Share', 'NORMAL' ],
};

// The receive's long-polling wait (the SDK's awaitDuration), ms.
const AWAIT = 3000;
// The smallest invisible duration Apache's Proxy accepts on receive, ms.
const INVISIBLE = 10000;
// Every call's deadline (the Java program's requestTimeout), ms.
const REQUEST_TIMEOUT = 5000;
// How long a client's start (routes, then the server's settings on Telemetry) may take, ms.
const START_LIMIT = 30000;
// How long a client's shutdown may take before the program goes on without it, ms: a
// PushConsumer's waits for its long polls in flight (up to 25 s), which nothing here needs.
const SHUTDOWN_LIMIT = 3000;
const T0 = Date.now();

// An assertion that did not hold.
class Failure extends Error {
  constructor(what) {
    super(what);
    this.name = 'AssertionError';
  }
}

function say(line) {
  process.stdout.write(line + '\n');
}

function note(line) {
  process.stderr.write(`note: ${line}\n`);
}

function check(cond, what) {
  if (!cond) {
    throw new Failure(what);
  }
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

// `promise`, or a Failure naming `what` once `ms` passed first.
async function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failure(`${what} within ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([ promise, late ]);
  } finally {
    clearTimeout(timer);
  }
}

// Waits until cond() holds, at most `limit` ms; false if it never did.
async function waitUntil(limit, cond) {
  const deadline = Date.now() + limit;
  while (!cond()) {
    if (Date.now() > deadline) {
      return false;
    }
    await sleep(50);
  }
  return true;
}

function body(m) {
  return m.body.toString('utf8');
}

function cause(e) {
  let c = e;
  while (c && c.cause && c.cause !== c) {
    c = c.cause;
  }
  return `${(c && c.name) || 'Error'}: ${(c && c.message) || String(c)}`;
}

// One line of the SDK's log: errors by their name and message, without their stacks.
function sdkLine(level, args) {
  const plain = args.map(a => (a instanceof Error ? `${a.name}: ${a.message}` : a));
  process.stderr.write(`sdk: ${level}: ${util.format(...plain)}\n`);
}

// The SDK's log: its warnings and errors on stderr, the rest dropped (its default writes
// ~/logs/rocketmq/rocketmq_client_nodejs.log). The consume services log there regardless.
const sdkLogger = {
  debug() {},
  info() {},
  warn(...args) {
    sdkLine('warn', args);
  },
  error(...args) {
    sdkLine('error', args);
  },
};

class Scenarios {
  constructor(endpoint, tls, topic, group) {
    this.options = {
      endpoints: endpoint,
      namespace: '',
      sslEnabled: tls,
      requestTimeout: REQUEST_TIMEOUT,
      logger: sdkLogger,
    };
    this.topic = topic;
    this.group = group;
    this.started = [];
  }

  async close() {
    for (const c of this.started.reverse()) {
      await within(SHUTDOWN_LIMIT, 'the client shut down', c.shutdown())
        .catch(e => note(`shutdown: ${cause(e)}`));
    }
    this.started = [];
  }

  async start(client, what) {
    try {
      await within(START_LIMIT, `${what} started`, client.startup());
    } catch (e) {
      await within(SHUTDOWN_LIMIT, 'the client shut down', client.shutdown()).catch(() => {});
      throw e;
    }
    this.started.push(client);
    return client;
  }

  message(text, extra = {}) {
    return {
      topic: this.topic,
      tag: 'TagA',
      keys: [ `key-${text}` ],
      body: Buffer.from(text, 'utf8'),
      ...extra,
    };
  }

  producer(checker) {
    return this.start(new Producer({ ...this.options, topic: this.topic, checker }), 'the producer');
  }

  simpleConsumer(topic, group) {
    return this.start(new SimpleConsumer({
      ...this.options,
      consumerGroup: group,
      subscriptions: new Map([[ topic, '*' ]]),
      awaitDuration: AWAIT,
    }), `the simple consumer of ${topic}`);
  }

  pushConsumer(consume) {
    return this.start(new PushConsumer({
      ...this.options,
      consumerGroup: this.group,
      subscriptions: new Map([[ this.topic, '*' ]]),
      messageListener: { consume },
    }), 'the push consumer');
  }

  async send(p, m, text, transaction) {
    const r = await p.send(m, transaction);
    check(r && r.messageId, `a message id for ${text}`);
    say(`SENT ${text} id=yes`);
  }

  // Receives from c until done() holds or `limit` ms passed, handing each message to each;
  // false if done() never held.
  static async receiveUntil(c, invisible, limit, done, each) {
    const deadline = Date.now() + limit;
    while (!done()) {
      if (Date.now() > deadline) {
        return false;
      }
      for (const m of await c.receive(16, invisible)) {
        await each(m);
      }
    }
    return true;
  }

  // ---- scenarios ----

  // produce: three normal messages with tag, keys and body; each receipt has a message id.
  async produce() {
    const p = await this.producer();
    for (let i = 0; i < 3; i++) {
      const b = `normal-${i}`;
      await this.send(p, this.message(b), b);
    }
  }

  // fifo: six messages of two message groups, interleaved, to a FIFO topic.
  async fifo() {
    const p = await this.producer();
    for (let i = 0; i < 3; i++) {
      for (const g of [ 'a', 'b' ]) {
        const b = `fifo-${g}-${i}`;
        await this.send(p, this.message(b, { messageGroup: `group-${g}` }), b);
      }
    }
  }

  // delay: one message with a delivery timestamp 2 s ahead, to a DELAY topic.
  async delay() {
    const p = await this.producer();
    const due = new Date(Date.now() + 2000);
    await this.send(p, this.message('delay-0', { deliveryTimestamp: due }), 'delay-0');
  }

  // delay-receive: a message due 2 s ahead is received once due, not earlier than its delivery
  // timestamp (less 1 s: Apache's timer wheel delivers by the second), and carries it.
  async delayReceive() {
    const p = await this.producer();
    const c = await this.simpleConsumer(this.topic, this.group);
    const due = Date.now() + 2000;
    await this.send(p, this.message('delay-1', { deliveryTimestamp: new Date(due) }), 'delay-1');
    let got;
    let at = 0;
    const ok = await Scenarios.receiveUntil(c, INVISIBLE, 40000, () => got, async m => {
      at = Date.now();
      got = m;
      await c.ack(m);
    });
    check(ok, 'the delayed message arrived within 40 s');
    note(`delay-1 arrived ${at - due} ms after its delivery timestamp`);
    say(`RECEIVED ${body(got)} attempt=${got.deliveryAttempt}`);
    check(at >= due - 1000, `not early: arrived ${due - at} ms before its time`);
    say('NOT EARLY');
    const ts = got.deliveryTimestamp;
    check(ts && ts.getTime() === due, `the delivery timestamp is carried: ${ts && ts.toISOString()}`);
    say('DELIVERY TIMESTAMP carried');
  }

  transactionalProducer(checked) {
    return this.producer({
      async check(view) {
        const b = body(view);
        if (!checked.has(b)) {
          checked.add(b);
          note(`the broker checked ${b}`);
        }
        return b.endsWith('-unknown') ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
      },
    });
  }

  async sendInTransaction(p, text) {
    const t = p.beginTransaction();
    await this.send(p, this.message(text), text, t);
    return t;
  }

  // transaction-send: the send side of transactions, one half message committed, one rolled back.
  async transactionSend() {
    const p = await this.transactionalProducer(new Set());
    await (await this.sendInTransaction(p, 'txn-commit')).commit();
    say('COMMITTED txn-commit');
    await (await this.sendInTransaction(p, 'txn-rollback')).rollback();
    say('ROLLED BACK txn-rollback');
  }

  // transaction: committed, rolled back, and one left open whose check-back the checker
  // commits; a SimpleConsumer then gets the committed two, never the rolled-back one.
  async transaction() {
    const checked = new Set();
    const p = await this.transactionalProducer(checked);
    const c = await this.simpleConsumer(this.topic, this.group);
    await (await this.sendInTransaction(p, 'txn-commit')).commit();
    say('COMMITTED txn-commit');
    await (await this.sendInTransaction(p, 'txn-rollback')).rollback();
    say('ROLLED BACK txn-rollback');
    await this.sendInTransaction(p, 'txn-unknown');
    say('LEFT OPEN txn-unknown');
    check(await waitUntil(60000, () => checked.has('txn-unknown')),
      'the broker checked txn-unknown back within 60 s');
    say('CHECKED txn-unknown -> COMMIT');
    const got = new Set();
    const order = [];
    const ok = await Scenarios.receiveUntil(c, INVISIBLE, 60000,
      () => got.has('txn-commit') && got.has('txn-unknown'), async m => {
        const b = body(m);
        if (!got.has(b)) {
          got.add(b);
          order.push(b);
        }
        await c.ack(m);
      });
    check(ok, `the committed messages arrived within 60 s, got [${order.join(', ')}]`);
    // One more receive past them: the rolled-back message is not there either.
    for (const m of await c.receive(16, INVISIBLE)) {
      got.add(body(m));
      await c.ack(m);
    }
    say(`RECEIVED ${[ ...got ].sort().join(' ')}`);
    check(!got.has('txn-rollback'), 'the rolled-back message was never delivered');
    say('NEVER txn-rollback');
    check(!checked.has('txn-commit') && !checked.has('txn-rollback'),
      `only the open transaction was checked, checked [${[ ...checked ].sort().join(', ')}]`);
  }

  // simple: receive and ack; a message left unacked comes back after its invisible duration
  // with deliveryAttempt 2; changeInvisibleDuration then keeps it away past the first duration,
  // and the ack with the handle it returned succeeds.
  async simple() {
    const p = await this.producer();
    const c = await this.simpleConsumer(this.topic, this.group);
    for (let i = 0; i < 3; i++) {
      const b = `simple-${i}`;
      await this.send(p, this.message(b), b);
    }
    const first = new Map();
    let receivedAt = 0;
    let ok = await Scenarios.receiveUntil(c, INVISIBLE, 30000, () => first.size === 3, m => {
      const b = body(m);
      check(!first.has(b), `no second delivery of ${b} within its invisible time`);
      first.set(b, m);
      if (b === 'simple-2') {
        receivedAt = Date.now();
      }
    });
    check(ok, `all three received within 30 s, got [${[ ...first.keys() ].sort().join(', ')}]`);
    note(`a receipt handle as the server wrote it: ${first.get('simple-0').receiptHandle}`);
    for (const b of [ 'simple-0', 'simple-1', 'simple-2' ]) {
      const m = first.get(b);
      say(`RECEIVED ${b} attempt=${m.deliveryAttempt} tag=${m.tag || '-'} keys=${m.keys.join(',')}`);
    }
    await c.ack(first.get('simple-0'));
    await c.ack(first.get('simple-1'));
    say('ACKED simple-0 simple-1');

    // simple-2 is not acked: it comes back once its invisible duration is over.
    let again;
    ok = await Scenarios.receiveUntil(c, INVISIBLE, 60000, () => again, m => {
      check(body(m) === 'simple-2', `only simple-2 comes back, not ${body(m)}`);
      again = m;
    });
    check(ok, 'simple-2 came back within 60 s');
    const after = Date.now() - receivedAt;
    note(`simple-2 came back ${after} ms after its first receive`);
    say(`RECEIVED ${body(again)} attempt=${again.deliveryAttempt}`);
    check(again.deliveryAttempt === 2, 'deliveryAttempt 2 on redelivery');
    check(after >= INVISIBLE - 1000, `not redelivered before its invisible duration: ${after} ms`);
    say('REDELIVERED after the invisible duration');

    // Extended to 25 s: it stays away past the 10 s it was received with.
    const extendedAt = Date.now();
    await c.changeInvisibleDuration(again, 25000);
    say('CHANGED invisible duration of simple-2 to 25s');
    while (Date.now() - extendedAt < INVISIBLE + 5000) {
      const l = await c.receive(16, INVISIBLE);
      check(l.length === 0, `nothing delivered while simple-2 is invisible, got ${l.length ? body(l[0]) : ''}`);
    }
    say('NOT REDELIVERED within 15s');
    await c.ack(again);
    say('ACKED simple-2');
  }

  // push: PushConsumer (concurrent): three messages consumed once; one whose listener always
  // fails is retried, with increasing deliveryAttempt, up to the group's max attempts, then
  // lands in the group's dead-letter queue (%DLQ%GROUP, read with a SimpleConsumer).
  async push() {
    const attempts = new Map();
    const p = await this.producer();
    await this.pushConsumer(m => {
      const b = body(m);
      if (!attempts.has(b)) {
        attempts.set(b, []);
      }
      attempts.get(b).push(m.deliveryAttempt);
      note(`${((Date.now() - T0) / 1000).toFixed(1)} s: ${b} attempt ${m.deliveryAttempt}`);
      return b === 'push-fail' ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
    });
    for (const b of [ 'push-0', 'push-1', 'push-2', 'push-fail' ]) {
      await this.send(p, this.message(b), b);
    }
    check(await waitUntil(30000, () => [ 'push-0', 'push-1', 'push-2' ].every(b => attempts.has(b))),
      `the three consumed within 30 s: [${[ ...attempts.keys() ].sort().join(', ')}]`);
    // Redelivered until the attempts stop growing: the message went to the DLQ. The
    // dead-letter topic exists once the first message went there: until then the SDK fails to
    // start a consumer of it (no route).
    const dlqTopic = `%DLQ%${this.group}`;
    const attemptsSoFar = () => JSON.stringify(Object.fromEntries(attempts));
    const deadline = Date.now() + 120000;
    let dlq;
    while (!dlq) {
      try {
        dlq = await this.simpleConsumer(dlqTopic, `${this.group}-dlq`);
      } catch (e) {
        check(Date.now() < deadline,
          `push-fail reached ${dlqTopic} within 120 s; attempts ${attemptsSoFar()}; last: ${cause(e)}`);
        await sleep(500);
      }
    }
    note(`the consumer of ${dlqTopic} started; attempts ${attemptsSoFar()}`);
    const dead = [];
    const ok = await Scenarios.receiveUntil(dlq, INVISIBLE, 60000, () => dead.length > 0, async m => {
      dead.push(`${body(m)} attempt=${m.deliveryAttempt}`);
      await dlq.ack(m);
    });
    check(ok, `push-fail received from ${dlqTopic} within 120 s; attempts ${attemptsSoFar()}`);
    for (const b of [ ...attempts.keys() ].sort()) {
      say(`CONSUMED ${b} attempts=[${attempts.get(b).join(', ')}]`);
    }
    say(`DLQ ${dead.join(' ')}`);
    check((attempts.get('push-fail') || []).length >= 2, 'push-fail retried');
  }

  // fifo-push: a FIFO PushConsumer (orderly group) gets each message group in the order sent.
  async fifoPush() {
    const seen = new Map();
    const p = await this.producer();
    for (let i = 0; i < 4; i++) {
      for (const g of [ 'a', 'b' ]) {
        const b = `fifo-${g}-${i}`;
        await this.send(p, this.message(b, { messageGroup: `group-${g}` }), b);
      }
    }
    await this.pushConsumer(m => {
      const g = m.messageGroup || '-';
      const b = body(m);
      if (!seen.has(g)) {
        seen.set(g, []);
      }
      seen.get(g).push(Number(b.slice(b.lastIndexOf('-') + 1)));
      note(`${((Date.now() - T0) / 1000).toFixed(1)} s: ${b}`);
      return ConsumeResult.SUCCESS;
    });
    const count = () => [ ...seen.values() ].reduce((n, l) => n + l.length, 0);
    check(await waitUntil(40000, () => count() >= 8),
      `all eight consumed within 40 s: ${JSON.stringify(Object.fromEntries(seen))}`);
    for (const g of [ ...seen.keys() ].sort()) {
      const l = seen.get(g);
      say(`GROUP ${g} [${l.join(', ')}]`);
      check(l.join(',') === '0,1,2,3', `group ${g} in order`);
    }
  }

  // share: two SimpleConsumers of one group; the first takes a batch of at most 3 and keeps it
  // invisible, the second gets the rest; both ack in time and no message reaches both.
  async share() {
    const n = 8;
    const p = await this.producer();
    const a = await this.simpleConsumer(this.topic, this.group);
    const b = await this.simpleConsumer(this.topic, this.group);
    for (let i = 0; i < n; i++) {
      const s = `share-${i}`;
      await this.send(p, this.message(s), s);
    }
    const by = new Map();
    const dup = [];
    const firstBatch = [];
    const deadline = Date.now() + 30000;
    while (firstBatch.length === 0 && Date.now() < deadline) {
      firstBatch.push(...await a.receive(3, 30000));
    }
    check(firstBatch.length > 0, 'the first consumer received within 30 s');
    for (const m of firstBatch) {
      by.set(body(m), 'a');
    }
    const ok = await Scenarios.receiveUntil(b, 30000, 30000, () => by.size === n, async m => {
      if (by.has(body(m))) {
        dup.push(body(m));
      } else {
        by.set(body(m), 'b');
      }
      await b.ack(m);
    });
    for (const m of firstBatch) {
      await a.ack(m);
    }
    check(ok, `all ${n} received within 30 s, got [${[ ...by.keys() ].sort().join(', ')}]`);
    // One more receive on each: nothing is left, and nothing comes twice.
    for (const c of [ a, b ]) {
      for (const m of await c.receive(16, INVISIBLE)) {
        dup.push(body(m));
        await c.ack(m);
      }
    }
    const onA = [ ...by.values() ].filter(v => v === 'a').length;
    note(`first consumer ${onA}, second ${n - onA}`);
    const both = onA > 0 && onA < n ? 'yes' : 'no';
    say(`SHARED ${n} distinct=${by.size} duplicates=${dup.length} both=${both}`);
    check(dup.length === 0, `no message delivered to both: [${dup.join(', ')}]`);
    check(onA > 0 && onA < n, 'both consumers got some');
  }
}

const RUN = {
  produce: s => s.produce(),
  fifo: s => s.fifo(),
  delay: s => s.delay(),
  'delay-receive': s => s.delayReceive(),
  'transaction-send': s => s.transactionSend(),
  transaction: s => s.transaction(),
  simple: s => s.simple(),
  push: s => s.push(),
  'fifo-push': s => s.fifoPush(),
  share: s => s.share(),
};

function usage() {
  process.stderr.write('usage: node scenarios.js ENDPOINT SCENARIO [--tls] [--topic T] [--group G]\n');
  for (const [ k, [ t, kind ]] of Object.entries(TOPICS)) {
    process.stderr.write(`  ${k} ${t} ${kind}\n`);
  }
  process.exit(2);
}

async function main(argv) {
  if (argv.length < 2 || !(argv[1] in TOPICS)) {
    usage();
  }
  const [ endpoint, scenario ] = argv;
  let tls = false;
  let topic = TOPICS[scenario][0];
  let group;
  const rest = argv.slice(2);
  while (rest.length > 0) {
    const opt = rest.shift();
    if (opt === '--tls') {
      tls = true;
    } else if (opt === '--topic' && rest.length > 0) {
      topic = rest.shift();
    } else if (opt === '--group' && rest.length > 0) {
      group = rest.shift();
    } else {
      process.stderr.write(`unknown option ${opt}\n`);
      process.exit(2);
    }
  }
  group = group || `${topic}Group`;
  // The SDK leaves some of its promises unawaited (a Telemetry write after its stream ended,
  // a periodic route refresh): noted, not fatal; the scenario's own checks decide.
  process.on('unhandledRejection', e => note(`an SDK promise failed unawaited: ${cause(e)}`));
  const t0 = Date.now();
  let status = 0;
  const s = new Scenarios(endpoint, tls, topic, group);
  try {
    await RUN[scenario](s);
    say(`OK ${scenario}`);
  } catch (e) {
    say(`FAILED ${scenario}: ${cause(e)}`);
    process.stderr.write(`${e && e.stack}\n`);
    status = 1;
  }
  await s.close();
  process.stderr.write(`scenario ${scenario} took ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  // The SDK's timers and channels would keep the process alive.
  process.exit(status);
}

main(process.argv.slice(2));
