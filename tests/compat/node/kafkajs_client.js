'use strict';
// The compatibility matrix's kafkajs program: usage `node kafkajs_client.js HOST:PORT`.
// Prints one `CHECK <name> ok|FAIL <reason>` line per check (tests/compat/harness.py).

const { Kafka, logLevel, Partitioners, CompressionTypes } = require('kafkajs');
const { unique, sleep, waitFor, assert, check, hardDeadline, track, stopClient, values, sameSet, runMain } = require('./common');

const bootstrap = process.argv[2];
if (!bootstrap) {
  console.error('usage: node kafkajs_client.js HOST:PORT');
  process.exit(2);
}
hardDeadline(200000);

const levels = { error: logLevel.ERROR, warn: logLevel.WARN, info: logLevel.INFO, debug: logLevel.DEBUG };
const kafka = new Kafka({
  clientId: 'sluice-compat-kafkajs',
  brokers: [bootstrap],
  logLevel: levels[process.env.KAFKAJS_LOG || 'error'] ?? logLevel.ERROR,
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2000 },
});

const TOPIC = unique('kjs-main');            // 3 partitions: produce, consume from beginning/end
const IDEMP = unique('kjs-idemp');           // 1 partition: idempotent produce
const COMP = unique('kjs-comp');             // 1 partition: compressed produce (gzip, kafkajs's own codec)
const GROUPED = unique('kjs-grouped');       // 1 partition: commit and resume
const REBAL = unique('kjs-rebal');           // 2 partitions: commit on rebalance
const TXN = unique('kjs-txn');               // 2 partitions: transactions
const DOOMED = unique('kjs-delete');         // deleted by admin_delete_topic

// Short fetch waits and heartbeats keep the program quick; the semantics are Kafka's defaults.
const CONSUMER_TIMINGS = { maxWaitTimeInMs: 250, heartbeatInterval: 500, sessionTimeout: 10000, rebalanceTimeout: 20000 };

// A consumer whose records land in `records` ({topic, partition, offset, key, value}).
async function startConsumer(groupId, topics, { fromBeginning, readUncommitted = false, autoCommit = true, onMessage } = {}) {
  const consumer = track(kafka.consumer({ groupId, readUncommitted, ...CONSUMER_TIMINGS }));
  const records = [];
  const state = { joined: null, fetchesAfterJoin: 0, rebalances: 0, joins: 0 };
  consumer.on(consumer.events.GROUP_JOIN, e => {
    state.joined = e.payload;
    state.joins += 1;
    state.fetchesAfterJoin = 0;
  });
  consumer.on(consumer.events.FETCH, () => {
    if (state.joined) state.fetchesAfterJoin += 1;
  });
  consumer.on(consumer.events.REBALANCING, () => {
    state.rebalances += 1;
  });
  await consumer.connect();
  for (const topic of topics) await consumer.subscribe({ topic, fromBeginning });
  await consumer.run({
    autoCommit,
    eachMessage: async ({ topic, partition, message, pause }) => {
      const record = {
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key ? message.key.toString() : null,
        value: message.value ? message.value.toString() : null,
      };
      records.push(record);
      if (onMessage) await onMessage(record, pause);
    },
  });
  return { consumer, records, state };
}

async function main() {
  const admin = track(kafka.admin());
  await admin.connect();

  await check('admin_create_topic', 20000, async () => {
    const created = await admin.createTopics({
      waitForLeaders: true,
      topics: [
        { topic: TOPIC, numPartitions: 3, replicationFactor: 1 },
        { topic: IDEMP, numPartitions: 1, replicationFactor: 1 },
        { topic: COMP, numPartitions: 1, replicationFactor: 1 },
        { topic: GROUPED, numPartitions: 1, replicationFactor: 1 },
        { topic: REBAL, numPartitions: 2, replicationFactor: 1 },
        { topic: TXN, numPartitions: 2, replicationFactor: 1 },
        { topic: DOOMED, numPartitions: 1, replicationFactor: 1 },
      ],
    });
    assert(created === true, `createTopics resolved ${created}, expected true`);
    const listed = await admin.listTopics();
    for (const t of [TOPIC, IDEMP, COMP, GROUPED, REBAL, TXN, DOOMED]) {
      assert(listed.includes(t), `listTopics lacks ${t}`);
    }
    // Creating an existing topic: kafkajs resolves false on TOPIC_ALREADY_EXISTS.
    const again = await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 3 }] });
    assert(again === false, `creating ${TOPIC} again resolved ${again}, expected false (already exists)`);
  });

  await check('admin_describe_topic', 15000, async () => {
    const { topics } = await admin.fetchTopicMetadata({ topics: [TOPIC] });
    assert(topics.length === 1 && topics[0].name === TOPIC, `metadata named ${JSON.stringify(topics.map(t => t.name))}`);
    const partitions = topics[0].partitions.map(p => p.partitionId).sort();
    assert(JSON.stringify(partitions) === '[0,1,2]', `partitions ${JSON.stringify(partitions)}, expected [0,1,2]`);
    for (const p of topics[0].partitions) {
      assert(p.partitionErrorCode === 0, `partition ${p.partitionId} error ${p.partitionErrorCode}`);
      assert(p.leader >= 0, `partition ${p.partitionId} has leader ${p.leader}`);
      assert(p.replicas.includes(p.leader) && p.isr.includes(p.leader), `partition ${p.partitionId} replicas/isr lack the leader`);
    }
    const cluster = await admin.describeCluster();
    assert(cluster.brokers.length >= 1, 'describeCluster lists no broker');
    assert(cluster.controller !== null && cluster.controller !== undefined, 'describeCluster has no controller');
  });

  const mainValues = [];
  await check('produce', 20000, async () => {
    const producer = track(kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false }));
    await producer.connect();
    for (let batch = 0; batch < 3; batch++) {
      const messages = [];
      for (let i = 0; i < 10; i++) {
        const v = `plain-${batch}-${i}`;
        messages.push({ key: `k${i}`, value: v, headers: { source: 'kafkajs' } });
        mainValues.push(v);
      }
      const meta = await producer.send({ topic: TOPIC, acks: -1, messages });
      for (const m of meta) {
        assert(m.errorCode === 0, `partition ${m.partition}: error code ${m.errorCode}`);
        assert(Number(m.baseOffset) >= 0, `partition ${m.partition}: base offset ${m.baseOffset}`);
      }
    }
    await stopClient(producer);
    const offsets = await admin.fetchTopicOffsets(TOPIC);
    const total = offsets.reduce((sum, p) => sum + Number(p.high) - Number(p.low), 0);
    assert(total === 30, `the topic's partitions hold ${total} records, expected 30 (${JSON.stringify(offsets)})`);
  });

  await check('produce_idempotent', 30000, async () => {
    const producer = track(kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false }));
    await producer.connect();
    const want = [];
    for (let batch = 0; batch < 3; batch++) {
      const messages = [];
      for (let i = 0; i < 5; i++) {
        want.push(`idemp-${batch}-${i}`);
        messages.push({ value: `idemp-${batch}-${i}` });
      }
      const meta = await producer.send({ topic: IDEMP, acks: -1, messages });
      assert(meta.length === 1 && meta[0].errorCode === 0, `send answered ${JSON.stringify(meta)}`);
      assert(Number(meta[0].baseOffset) === batch * 5, `batch ${batch} got base offset ${meta[0].baseOffset}, expected ${batch * 5}`);
    }
    await stopClient(producer);
    const { consumer, records } = await startConsumer(unique('kjs-idemp-reader'), [IDEMP], { fromBeginning: true });
    await waitFor(() => records.length >= want.length, 20000, `${want.length} idempotent records (got ${records.length})`);
    await sleep(300);
    await stopClient(consumer);
    assert(records.length === want.length, `read ${records.length} records, expected ${want.length}`);
    records.forEach((r, i) => {
      assert(r.offset === i && r.value === want[i], `record ${i} is offset ${r.offset} value ${r.value}, expected offset ${i} value ${want[i]}`);
    });
  });

  // kafkajs ships only the gzip codec (snappy, lz4 and zstd need third-party codec packages).
  await check('produce_compressed', 30000, async () => {
    const producer = track(kafka.producer({ allowAutoTopicCreation: false }));
    await producer.connect();
    const want = [];
    for (let batch = 0; batch < 2; batch++) {
      const messages = [];
      for (let i = 0; i < 5; i++) {
        const v = `gzip-${batch}-${i}-${'x'.repeat(200)}`;
        want.push(v);
        messages.push({ value: v });
      }
      await producer.send({ topic: COMP, acks: -1, compression: CompressionTypes.GZIP, messages });
    }
    await stopClient(producer);
    const { consumer, records } = await startConsumer(unique('kjs-comp-reader'), [COMP], { fromBeginning: true });
    await waitFor(() => records.length >= want.length, 20000, `${want.length} compressed records (got ${records.length})`);
    await sleep(300);
    await stopClient(consumer);
    assert(records.length === want.length, `read ${records.length} records, expected ${want.length}`);
    records.forEach((r, i) => {
      assert(r.offset === i && r.value === want[i], `record ${i} is offset ${r.offset} value ${String(r.value).slice(0, 12)}, expected ${want[i].slice(0, 12)}`);
    });
  });

  await check('consume_from_beginning', 30000, async () => {
    assert(mainValues.length === 30, 'produce did not complete');
    const { consumer, records } = await startConsumer(unique('kjs-beginning'), [TOPIC], { fromBeginning: true });
    await waitFor(() => records.length >= 30, 25000, `30 records from the beginning (got ${records.length})`);
    await sleep(300);
    await stopClient(consumer);
    assert(records.length === 30, `read ${records.length} records, expected 30`);
    assert(sameSet(values(records), mainValues), 'the records read differ from those produced');
    for (const r of records) {
      assert(r.key !== null && r.key.startsWith('k'), `record ${r.partition}/${r.offset} lost its key`);
    }
  });

  await check('consume_from_end', 40000, async () => {
    assert(mainValues.length === 30, 'produce did not complete');
    const { consumer, records, state } = await startConsumer(unique('kjs-end'), [TOPIC], { fromBeginning: false });
    // Positioned once it has joined and finished a fetch round (the latest offsets are resolved before it).
    await waitFor(() => state.joined && state.fetchesAfterJoin >= 1, 25000, 'the consumer to join and fetch');
    const producer = track(kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner }));
    await producer.connect();
    const fresh = [];
    for (let i = 0; i < 6; i++) fresh.push(`late-${i}`);
    await producer.send({ topic: TOPIC, acks: -1, messages: fresh.map((v, i) => ({ key: `late${i}`, value: v })) });
    await stopClient(producer);
    await waitFor(() => records.length >= fresh.length, 15000, `the ${fresh.length} new records (got ${records.length})`);
    await sleep(300);
    await stopClient(consumer);
    const old = records.filter(r => !r.value.startsWith('late-'));
    assert(old.length === 0, `a consumer at the end read ${old.length} older records (e.g. ${old[0] && old[0].value})`);
    assert(sameSet(values(records), fresh), `read ${JSON.stringify(values(records))}, expected ${JSON.stringify(fresh)}`);
  });

  const group = unique('kjs-group');
  let describeProblem = 'group_commit_and_resume did not reach the describe step';
  await check('group_commit_and_resume', 60000, async () => {
    const producer = track(kafka.producer());
    await producer.connect();
    const all = [];
    for (let i = 0; i < 10; i++) all.push(`g-${i}`);
    await producer.send({ topic: GROUPED, acks: -1, messages: all.map(v => ({ value: v })) });
    await stopClient(producer);

    // Consumer A reads the first 4 records, pauses, commits offset 4 and leaves.
    let pausedAt = null;
    const a = await startConsumer(group, [GROUPED], {
      fromBeginning: true,
      autoCommit: false,
      onMessage: (record, pause) => {
        if (record.offset === 3 && pausedAt === null) {
          pause();
          pausedAt = record.offset;
        }
      },
    });
    await waitFor(() => pausedAt !== null, 25000, `consumer A to read 4 records (got ${a.records.length})`);
    await a.consumer.commitOffsets([{ topic: GROUPED, partition: 0, offset: '4' }]);
    const committed = await admin.fetchOffsets({ groupId: group, topics: [GROUPED] });
    const at = committed[0].partitions.find(p => p.partition === 0);
    assert(at && at.offset === '4', `the group's committed offset is ${JSON.stringify(at)}, expected 4`);
    const readByA = a.records.filter(r => r.offset <= 3);
    assert(readByA.length === 4, `consumer A read ${readByA.length} of the first 4 records`);
    await stopClient(a.consumer);

    // Consumer B in the same group resumes exactly at 4.
    const b = await startConsumer(group, [GROUPED], { fromBeginning: true });
    await waitFor(() => b.records.length >= 6, 25000, `consumer B to read 6 records (got ${b.records.length})`);
    await sleep(300);

    // admin_describe_group runs here, while B is a member.
    try {
      const { groups } = await admin.describeGroups([group]);
      const g = groups[0];
      const problems = [];
      if (!g || g.groupId !== group) problems.push(`described ${JSON.stringify(groups.map(x => x.groupId))}`);
      else {
        if (g.errorCode !== 0) problems.push(`error code ${g.errorCode}`);
        if (g.state !== 'Stable') problems.push(`state ${g.state}, expected Stable`);
        if (g.protocolType !== 'consumer') problems.push(`protocol type ${g.protocolType}`);
        if (!g.protocol) problems.push('no assignment protocol');
        if (g.members.length !== 1) problems.push(`${g.members.length} members, expected 1`);
        else {
          const m = g.members[0];
          if (m.clientId !== 'sluice-compat-kafkajs') problems.push(`member client id ${m.clientId}`);
          if (!m.memberAssignment || m.memberAssignment.length === 0) problems.push('member has no assignment');
          if (!m.memberMetadata || m.memberMetadata.length === 0) problems.push('member has no metadata');
        }
      }
      describeProblem = problems.length ? `while a member was active: ${problems.join('; ')}` : null;
    } catch (e) {
      describeProblem = `describeGroups failed: ${e.message}`;
    }

    await stopClient(b.consumer);
    const offsets = b.records.map(r => r.offset);
    assert(JSON.stringify(offsets) === '[4,5,6,7,8,9]', `consumer B read offsets ${JSON.stringify(offsets)}, expected [4..9]`);

    // After B left (kafkajs auto-commits at the end of each batch), the group is Empty at offset 10.
    if (describeProblem === null) {
      try {
        const { groups } = await admin.describeGroups([group]);
        const g = groups[0];
        if (g.state !== 'Empty' || g.members.length !== 0) {
          describeProblem = `after the last member left: state ${g.state} with ${g.members.length} members, expected Empty with 0`;
        }
      } catch (e) {
        describeProblem = `describeGroups after leaving failed: ${e.message}`;
      }
    }
    const final = await admin.fetchOffsets({ groupId: group, topics: [GROUPED] });
    const end = final[0].partitions.find(p => p.partition === 0);
    assert(end && end.offset === '10', `after B the committed offset is ${JSON.stringify(end)}, expected 10`);
  });

  await check('admin_describe_group', 5000, async () => {
    if (describeProblem) throw new Error(describeProblem);
    const groups = await admin.listGroups();
    assert(groups.groups.some(g => g.groupId === group && g.protocolType === 'consumer'), `listGroups lacks ${group}`);
  });

  // kafkajs commits the offsets it has processed when a heartbeat answers REBALANCE_IN_PROGRESS
  // in the middle of a batch (runner.heartbeat -> autoCommitOffsets), i.e. an OffsetCommit
  // from a current member while the group prepares a rebalance. Kafka accepts that commit; if
  // it is refused, the partitions' next owners re-read records consumer A already processed.
  await check('group_rebalance_commit', 60000, async () => {
    const rgroup = unique('kjs-rebal-group');
    const producer = track(kafka.producer());
    await producer.connect();
    const first = [];
    for (let p = 0; p < 2; p++) {
      const messages = [];
      for (let i = 0; i < 10; i++) {
        first.push(`r${p}-${i}`);
        messages.push({ partition: p, value: `r${p}-${i}` });
      }
      await producer.send({ topic: REBAL, acks: -1, messages });
    }
    // A processes slowly (200 ms a record), so B joins while A is inside a batch.
    const a = await startConsumer(rgroup, [REBAL], {
      fromBeginning: true,
      onMessage: () => new Promise(resolve => setTimeout(resolve, 200)),
    });
    await waitFor(() => a.records.length >= 3, 25000, `consumer A to process 3 records (got ${a.records.length})`);
    const b = await startConsumer(rgroup, [REBAL], { fromBeginning: true });
    const assigned = s => (s.joined ? Object.values(s.joined.memberAssignment).reduce((n, ps) => n + ps.length, 0) : 0);
    await waitFor(() => b.state.joined && a.state.joins >= 2 && assigned(a.state) === 1 && assigned(b.state) === 1,
      30000, `both consumers to hold one partition each (A joins ${a.state.joins} holds ${assigned(a.state)}, B holds ${assigned(b.state)})`);
    assert(a.records.length < first.length,
      `consumer A processed all ${a.records.length} records before the rebalance; the check did not exercise the revoke path`);
    const all = () => [...a.records, ...b.records];
    await waitFor(() => new Set(all().map(r => r.value)).size >= first.length, 25000,
      `the ${first.length} records to be processed by A or B (got ${new Set(all().map(r => r.value)).size})`);
    const later = ['late-r0', 'late-r1'];
    await producer.send({ topic: REBAL, acks: -1, messages: [{ partition: 0, value: later[0] }, { partition: 1, value: later[1] }] });
    await stopClient(producer);
    await waitFor(() => all().filter(r => r.value.startsWith('late-')).length >= 2, 20000, 'the 2 records produced after the rebalance');
    await sleep(300);
    await stopClient(b.consumer);
    await stopClient(a.consumer);
    const counts = new Map();
    for (const r of all()) counts.set(r.value, (counts.get(r.value) || 0) + 1);
    const twice = [...counts].filter(([, n]) => n > 1).map(([v, n]) => `${v}x${n}`);
    assert(twice.length === 0,
      `${twice.length} records were processed more than once across the rebalance (${twice.slice(0, 6).join(', ')}): ` +
      'consumer A\'s revoke-path OffsetCommit did not take effect');
    assert(counts.size === first.length + later.length, `processed ${counts.size} distinct records, expected ${first.length + later.length}`);
    const offsets = await admin.fetchOffsets({ groupId: rgroup, topics: [REBAL] });
    for (const p of offsets[0].partitions) {
      assert(p.offset === '11', `partition ${p.partition}: committed ${p.offset}, expected 11`);
    }
  });

  const txGroup = unique('kjs-txn-group');
  let sendOffsetsProblem = 'transactions did not reach the sendOffsets step';
  const txnValues = { committed: ['c-0', 'c-1', 'c-2', 'c-3'], aborted: ['x-0', 'x-1', 'x-2', 'x-3'], marker: 'c-end' };
  await check('transactions', 60000, async () => {
    const producer = track(kafka.producer({
      transactionalId: unique('kjs-txn-id'),
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: 30000,
    }));
    await producer.connect();

    const committed = await producer.transaction();
    await committed.send({ topic: TXN, messages: txnValues.committed.map((v, i) => ({ partition: i % 2, value: v })) });
    await committed.sendOffsets({ consumerGroupId: txGroup, topics: [{ topic: GROUPED, partitions: [{ partition: 0, offset: '7' }] }] });
    await committed.commit();
    // The commit's markers reach __consumer_offsets asynchronously (Kafka answers EndTxn once
    // the commit is prepared): the offset becomes visible shortly after, not necessarily at once.
    let at;
    try {
      await waitFor(async () => {
        const offsets = await admin.fetchOffsets({ groupId: txGroup, topics: [GROUPED] });
        at = offsets[0].partitions.find(p => p.partition === 0);
        return at && at.offset === '7';
      }, 10000, 'the transaction\'s offset to become visible');
      sendOffsetsProblem = null;
    } catch (e) {
      sendOffsetsProblem = `10 s after commit the group's offset is ${JSON.stringify(at)}, expected 7 (${e.message})`;
    }

    const aborted = await producer.transaction();
    await aborted.send({ topic: TXN, messages: txnValues.aborted.map((v, i) => ({ partition: i % 2, value: v })) });
    await aborted.abort();

    const last = await producer.transaction();
    await last.send({ topic: TXN, messages: [{ partition: 0, value: txnValues.marker }, { partition: 1, value: txnValues.marker }] });
    await last.commit();
    await stopClient(producer);

    const { consumer, records } = await startConsumer(unique('kjs-rc'), [TXN], { fromBeginning: true, readUncommitted: false });
    await waitFor(() => records.filter(r => r.value === txnValues.marker).length >= 2, 25000,
      `the last committed transaction's records on both partitions (read ${JSON.stringify(values(records))})`);
    await sleep(300);
    await stopClient(consumer);
    const got = values(records);
    const leaked = got.filter(v => v.startsWith('x-'));
    assert(leaked.length === 0, `a read_committed consumer saw aborted records ${JSON.stringify(leaked)}`);
    const want = [...txnValues.committed, txnValues.marker, txnValues.marker];
    assert(sameSet(got, want), `read_committed read ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    // Control records occupy offsets: each partition holds 2+2+1 data records and 3 markers.
    const offsets = await admin.fetchTopicOffsets(TXN);
    for (const p of offsets) {
      assert(Number(p.high) === 8, `partition ${p.partition} ends at ${p.high}, expected 8 (5 records, 3 transaction markers)`);
    }
  });

  await check('transactions_send_offsets', 5000, async () => {
    if (sendOffsetsProblem) throw new Error(sendOffsetsProblem);
  });

  await check('transactions_read_uncommitted', 30000, async () => {
    const { consumer, records } = await startConsumer(unique('kjs-ru'), [TXN], { fromBeginning: true, readUncommitted: true });
    await waitFor(() => records.filter(r => r.value === txnValues.marker).length >= 2, 25000,
      `the marker records on both partitions (read ${JSON.stringify(values(records))})`);
    await sleep(300);
    await stopClient(consumer);
    const want = [...txnValues.committed, ...txnValues.aborted, txnValues.marker, txnValues.marker];
    assert(sameSet(values(records), want), `read_uncommitted read ${JSON.stringify(values(records))}, expected ${JSON.stringify(want)}`);
  });

  await check('admin_delete_topic', 20000, async () => {
    await admin.deleteTopics({ topics: [DOOMED], timeout: 10000 });
    await waitFor(async () => !(await admin.listTopics()).includes(DOOMED), 10000, `${DOOMED} to leave listTopics`);
    let error = null;
    try {
      await admin.fetchTopicMetadata({ topics: [DOOMED] });
    } catch (e) {
      error = e;
    }
    assert(error && /does not host this topic-partition|UNKNOWN_TOPIC_OR_PARTITION/i.test(`${error.type} ${error.message}`),
      `metadata for the deleted topic answered ${error ? error.message : 'without an error'}`);
  });
}

runMain(main);
