'use strict';
// The compatibility matrix's @confluentinc/kafka-javascript program (its KafkaJS-compatible API
// over librdkafka): usage `node confluent_client.js HOST:PORT`.
// Prints one `CHECK <name> ok|FAIL <reason>` line per check (tests/compat/harness.py).

const ckjs = require('@confluentinc/kafka-javascript');
const { Kafka, logLevel, CompressionTypes } = ckjs.KafkaJS;
const { unique, sleep, waitFor, assert, check, hardDeadline, track, stopClient, values, sameSet, runMain } = require('./common');

const bootstrap = process.argv[2];
if (!bootstrap) {
  console.error('usage: node confluent_client.js HOST:PORT');
  process.exit(2);
}
hardDeadline(200000);
console.error(`librdkafka ${ckjs.librdkafkaVersion}; features ${ckjs.features.join(',')}`);

const levels = { error: logLevel.ERROR, warn: logLevel.WARN, info: logLevel.INFO, debug: logLevel.DEBUG };
const CLIENT_ID = 'sluice-compat-confluent';
const kafka = new Kafka({
  // CKJS_DEBUG=cgrp,protocol,... turns on librdkafka's debug contexts.
  ...(process.env.CKJS_DEBUG ? { debug: process.env.CKJS_DEBUG } : {}),
  kafkaJS: {
    clientId: CLIENT_ID,
    brokers: [bootstrap],
    logLevel: levels[process.env.CKJS_LOG || 'error'] ?? logLevel.ERROR,
    connectionTimeout: 5000,
    requestTimeout: 15000,
  },
});

const TOPIC = unique('ckjs-main');          // 3 partitions: produce, consume from beginning/end
const IDEMP = unique('ckjs-idemp');         // 1 partition: idempotent produce
const COMP = unique('ckjs-comp');           // 1 partition: compressed produce
const GROUPED = unique('ckjs-grouped');     // 1 partition: commit and resume
const REBAL = unique('ckjs-rebal');         // 2 partitions: commit on rebalance
const NEWPROTO = unique('ckjs-kip848');     // 2 partitions: the KIP-848 consumer protocol
const TXN = unique('ckjs-txn');             // 2 partitions: transactions
const DOOMED = unique('ckjs-delete');       // deleted by admin_delete_topic

const CLASSIC_TIMINGS = { maxWaitTimeInMs: 100, heartbeatInterval: 500, sessionTimeout: 10000, rebalanceTimeout: 30000 };

function producer(kafkaJS = {}, extra = {}) {
  // linger.ms 0: every awaited send goes out at once.
  return track(kafka.producer({ 'linger.ms': 0, ...extra, kafkaJS: { acks: -1, allowAutoTopicCreation: false, ...kafkaJS } }));
}

// A consumer whose records land in `records`; `state.stats` holds librdkafka's latest
// statistics (per-partition fetch state and position).
async function startConsumer(groupId, topics, { fromBeginning, readUncommitted = false, autoCommit = true,
  autoCommitInterval = 5000, onMessage, protocol = 'classic' } = {}) {
  const state = { stats: null };
  const kafkaJS = { groupId, fromBeginning, readUncommitted, autoCommit, autoCommitInterval, allowAutoTopicCreation: false };
  const extra = { 'statistics.interval.ms': 100, stats_cb: e => { try { state.stats = JSON.parse(e.message); } catch (_) { /* partial */ } } };
  if (protocol === 'classic') {
    Object.assign(kafkaJS, CLASSIC_TIMINGS);
  } else {
    // The KIP-848 protocol leaves session and heartbeat timing to the broker.
    kafkaJS.maxWaitTimeInMs = 100;
    extra['group.protocol'] = protocol;
  }
  const consumer = track(kafka.consumer({ ...extra, kafkaJS }));
  const records = [];
  await consumer.connect();
  await consumer.subscribe({ topics });
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      const record = {
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key ? message.key.toString() : null,
        value: message.value ? message.value.toString() : null,
      };
      records.push(record);
      if (onMessage) await onMessage(record);
    },
  });
  return { consumer, records, state };
}

// True once every assigned partition is fetching from a resolved position (librdkafka stats).
function positioned(c) {
  const assignment = c.consumer.assignment();
  if (!assignment.length || !c.state.stats) return false;
  return assignment.every(({ topic, partition }) => {
    const t = c.state.stats.topics && c.state.stats.topics[topic];
    const p = t && t.partitions && t.partitions[String(partition)];
    return p && p.fetch_state === 'active' && p.next_offset >= 0;
  });
}

async function committedOffset(admin, groupId, topic, partition, requireStableOffsets = false) {
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic], requireStableOffsets });
  const t = offsets.find(x => x.topic === topic);
  const p = t && t.partitions.find(x => x.partition === partition);
  return p ? String(p.offset) : undefined;
}

async function main() {
  const admin = track(kafka.admin());
  await admin.connect();

  await check('admin_create_topic', 20000, async () => {
    const created = await admin.createTopics({
      timeout: 10000,
      topics: [
        { topic: TOPIC, numPartitions: 3, replicationFactor: 1 },
        { topic: IDEMP, numPartitions: 1, replicationFactor: 1 },
        { topic: COMP, numPartitions: 1, replicationFactor: 1 },
        { topic: GROUPED, numPartitions: 1, replicationFactor: 1 },
        { topic: REBAL, numPartitions: 2, replicationFactor: 1 },
        { topic: NEWPROTO, numPartitions: 2, replicationFactor: 1 },
        { topic: TXN, numPartitions: 2, replicationFactor: 1 },
        { topic: DOOMED, numPartitions: 1, replicationFactor: 1 },
      ],
    });
    assert(created === true, `createTopics resolved ${created}, expected true`);
    const listed = await admin.listTopics();
    for (const t of [TOPIC, IDEMP, COMP, GROUPED, REBAL, NEWPROTO, TXN, DOOMED]) {
      assert(listed.includes(t), `listTopics lacks ${t}`);
    }
    const again = await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 3 }] });
    assert(again === false, `creating ${TOPIC} again resolved ${again}, expected false (already exists)`);
  });

  await check('admin_describe_topic', 15000, async () => {
    const topics = await admin.fetchTopicMetadata({ topics: [TOPIC] });
    assert(topics.length === 1 && topics[0].name === TOPIC, `metadata named ${JSON.stringify(topics.map(t => t.name))}`);
    const partitions = topics[0].partitions.map(p => p.partitionId).sort();
    assert(JSON.stringify(partitions) === '[0,1,2]', `partitions ${JSON.stringify(partitions)}, expected [0,1,2]`);
    for (const p of topics[0].partitions) {
      assert(p.leader >= 0, `partition ${p.partitionId} has leader ${p.leader}`);
      assert(p.replicas.includes(p.leader) && p.isr.includes(p.leader), `partition ${p.partitionId} replicas/isr lack the leader`);
    }
    assert(topics[0].isInternal === false, `isInternal is ${topics[0].isInternal}`);
  });

  const mainValues = [];
  await check('produce', 20000, async () => {
    const p = producer({ idempotent: false });
    await p.connect();
    for (let batch = 0; batch < 3; batch++) {
      const messages = [];
      for (let i = 0; i < 10; i++) {
        const v = `plain-${batch}-${i}`;
        messages.push({ key: `k${i}`, value: v, headers: { source: 'confluent' } });
        mainValues.push(v);
      }
      const meta = await p.send({ topic: TOPIC, messages });
      for (const m of meta) {
        assert(m.errorCode === 0, `partition ${m.partition}: error code ${m.errorCode}`);
        assert(Number(m.baseOffset) >= 0, `partition ${m.partition}: base offset ${m.baseOffset}`);
      }
    }
    await stopClient(p);
    const offsets = await admin.fetchTopicOffsets(TOPIC);
    const total = offsets.reduce((sum, x) => sum + Number(x.high) - Number(x.low), 0);
    assert(total === 30, `the topic's partitions hold ${total} records, expected 30 (${JSON.stringify(offsets)})`);
  });

  await check('produce_idempotent', 30000, async () => {
    const p = producer({ idempotent: true });
    await p.connect();
    const want = [];
    for (let batch = 0; batch < 3; batch++) {
      const messages = [];
      for (let i = 0; i < 5; i++) {
        want.push(`idemp-${batch}-${i}`);
        messages.push({ value: `idemp-${batch}-${i}` });
      }
      const meta = await p.send({ topic: IDEMP, messages });
      assert(meta.length === 1 && meta[0].errorCode === 0, `send answered ${JSON.stringify(meta)}`);
      assert(Number(meta[0].baseOffset) === batch * 5, `batch ${batch} got base offset ${meta[0].baseOffset}, expected ${batch * 5}`);
    }
    await stopClient(p);
    const c = await startConsumer(unique('ckjs-idemp-reader'), [IDEMP], { fromBeginning: true });
    await waitFor(() => c.records.length >= want.length, 20000, `${want.length} idempotent records (got ${c.records.length})`);
    await sleep(300);
    await stopClient(c.consumer);
    assert(c.records.length === want.length, `read ${c.records.length} records, expected ${want.length}`);
    c.records.forEach((r, i) => {
      assert(r.offset === i && r.value === want[i], `record ${i} is offset ${r.offset} value ${r.value}, expected offset ${i} value ${want[i]}`);
    });
  });

  await check('produce_compressed', 40000, async () => {
    const codecs = ['GZIP', 'SNAPPY', 'LZ4', 'ZSTD'];
    const want = [];
    for (const codec of codecs) {
      const p = producer({ compression: CompressionTypes[codec] }, { 'linger.ms': 5 });
      await p.connect();
      const messages = [];
      for (let i = 0; i < 5; i++) {
        const v = `${codec.toLowerCase()}-${i}-${'x'.repeat(200)}`;
        want.push(v);
        messages.push({ value: v });
      }
      try {
        await p.send({ topic: COMP, messages });
      } catch (e) {
        throw new Error(`${codec}: ${e.message}`);
      } finally {
        await stopClient(p);
      }
    }
    const c = await startConsumer(unique('ckjs-comp-reader'), [COMP], { fromBeginning: true });
    await waitFor(() => c.records.length >= want.length, 20000, `${want.length} compressed records (got ${c.records.length})`);
    await sleep(300);
    await stopClient(c.consumer);
    assert(c.records.length === want.length, `read ${c.records.length} records, expected ${want.length}`);
    c.records.forEach((r, i) => {
      assert(r.offset === i && r.value === want[i], `record ${i} is offset ${r.offset} value ${String(r.value).slice(0, 12)}, expected ${want[i].slice(0, 12)}`);
    });
  });

  await check('consume_from_beginning', 30000, async () => {
    assert(mainValues.length === 30, 'produce did not complete');
    const c = await startConsumer(unique('ckjs-beginning'), [TOPIC], { fromBeginning: true });
    await waitFor(() => c.records.length >= 30, 25000, `30 records from the beginning (got ${c.records.length})`);
    await sleep(300);
    await stopClient(c.consumer);
    assert(c.records.length === 30, `read ${c.records.length} records, expected 30`);
    assert(sameSet(values(c.records), mainValues), 'the records read differ from those produced');
    for (const r of c.records) {
      assert(r.key !== null && r.key.startsWith('k'), `record ${r.partition}/${r.offset} lost its key`);
    }
  });

  await check('consume_from_end', 40000, async () => {
    assert(mainValues.length === 30, 'produce did not complete');
    const c = await startConsumer(unique('ckjs-end'), [TOPIC], { fromBeginning: false });
    await waitFor(() => positioned(c), 25000, 'the consumer to be assigned and positioned');
    const p = producer();
    await p.connect();
    const fresh = [];
    for (let i = 0; i < 6; i++) fresh.push(`late-${i}`);
    await p.send({ topic: TOPIC, messages: fresh.map((v, i) => ({ key: `late${i}`, value: v })) });
    await stopClient(p);
    await waitFor(() => c.records.length >= fresh.length, 15000, `the ${fresh.length} new records (got ${c.records.length})`);
    await sleep(300);
    await stopClient(c.consumer);
    const old = c.records.filter(r => !r.value.startsWith('late-'));
    assert(old.length === 0, `a consumer at the end read ${old.length} older records (e.g. ${old[0] && old[0].value})`);
    assert(sameSet(values(c.records), fresh), `read ${JSON.stringify(values(c.records))}, expected ${JSON.stringify(fresh)}`);
  });

  const group = unique('ckjs-group');
  let describeProblem = 'group_commit_and_resume did not reach the describe step';
  await check('group_commit_and_resume', 60000, async () => {
    const p = producer();
    await p.connect();
    const all = [];
    for (let i = 0; i < 10; i++) all.push(`g-${i}`);
    await p.send({ topic: GROUPED, messages: all.map(v => ({ value: v })) });
    await stopClient(p);

    // Consumer A processes the first 4 records (it may be handed more: those are not
    // processed), commits offset 4 and leaves.
    const a = await startConsumer(group, [GROUPED], { fromBeginning: true, autoCommit: false });
    await waitFor(() => a.records.some(r => r.offset === 3), 25000, `consumer A to read 4 records (got ${a.records.length})`);
    await a.consumer.commitOffsets([{ topic: GROUPED, partition: 0, offset: '4' }]);
    // commitOffsets may resolve before librdkafka has even sent the OffsetCommit (its debug log
    // shows the admin's OffsetFetch going out first, seen on a loaded machine): wait for it.
    let at;
    try {
      await waitFor(async () => (at = await committedOffset(admin, group, GROUPED, 0)) === '4', 10000, 'the commit');
    } catch (e) {
      throw new Error(`the group's committed offset is ${at} 10 s after the commit, expected 4`);
    }
    const readByA = a.records.filter(r => r.offset <= 3);
    assert(readByA.length === 4, `consumer A read ${readByA.length} of the first 4 records`);
    await stopClient(a.consumer);

    // Consumer B in the same group resumes exactly at 4.
    const b = await startConsumer(group, [GROUPED], { fromBeginning: true, autoCommit: false });
    await waitFor(() => b.records.length >= 6, 25000, `consumer B to read 6 records (got ${b.records.length})`);
    await sleep(300);

    // admin_describe_group runs here, while B is a member.
    try {
      const { groups } = await admin.describeGroups([group]);
      const g = groups[0];
      const problems = [];
      const { ConsumerGroupStates } = ckjs.KafkaJS;
      if (!g || g.groupId !== group) problems.push(`described ${JSON.stringify(groups.map(x => x.groupId))}`);
      else {
        if (g.error) problems.push(`error ${g.error.message}`);
        if (g.state !== ConsumerGroupStates.STABLE) problems.push(`state ${g.state}, expected STABLE (${ConsumerGroupStates.STABLE})`);
        if (g.protocolType !== 'consumer') problems.push(`protocol type ${g.protocolType}`);
        if (g.isSimpleConsumerGroup) problems.push('described as a simple consumer group');
        if (g.members.length !== 1) problems.push(`${g.members.length} members, expected 1`);
        else {
          const m = g.members[0];
          if (m.clientId !== CLIENT_ID) problems.push(`member client id ${m.clientId}`);
          const parts = m.assignment && m.assignment.topicPartitions;
          if (!parts || parts.length !== 1 || parts[0].topic !== GROUPED) problems.push(`member assignment ${JSON.stringify(m.assignment)}`);
        }
      }
      describeProblem = problems.length ? `while a member was active: ${problems.join('; ')}` : null;
    } catch (e) {
      describeProblem = `describeGroups failed: ${e.message}`;
    }

    await b.consumer.commitOffsets();
    await stopClient(b.consumer);
    const offsets = b.records.map(r => r.offset);
    assert(JSON.stringify(offsets) === '[4,5,6,7,8,9]', `consumer B read offsets ${JSON.stringify(offsets)}, expected [4..9]`);
    const end = await committedOffset(admin, group, GROUPED, 0);
    assert(end === '10', `after B the committed offset is ${end}, expected 10`);
    if (describeProblem === null) {
      try {
        const { groups } = await admin.describeGroups([group]);
        const g = groups[0];
        const { ConsumerGroupStates } = ckjs.KafkaJS;
        if (g.state !== ConsumerGroupStates.EMPTY || g.members.length !== 0) {
          describeProblem = `after the last member left: state ${g.state} with ${g.members.length} members, expected EMPTY (${ConsumerGroupStates.EMPTY}) with 0`;
        }
      } catch (e) {
        describeProblem = `describeGroups after leaving failed: ${e.message}`;
      }
    }
  });

  await check('admin_describe_group', 5000, async () => {
    if (describeProblem) throw new Error(describeProblem);
    const listed = await admin.listGroups();
    assert(listed.groups.some(g => g.groupId === group), `listGroups lacks ${group}`);
  });

  // librdkafka commits the offsets it has stored when its partitions are revoked (eager
  // rebalance, enable.auto.commit): an OffsetCommit from a current member while the group
  // prepares a rebalance. Kafka accepts it; if refused, the partitions' next owners re-read
  // records consumer A already processed.
  await check('group_rebalance_commit', 60000, async () => {
    const rgroup = unique('ckjs-rebal-group');
    const p = producer();
    await p.connect();
    const first = [];
    for (let part = 0; part < 2; part++) {
      const messages = [];
      for (let i = 0; i < 10; i++) {
        first.push(`r${part}-${i}`);
        messages.push({ partition: part, value: `r${part}-${i}` });
      }
      await p.send({ topic: REBAL, messages });
    }
    // A processes slowly and never commits on its own timer: only the revoke path commits.
    const a = await startConsumer(rgroup, [REBAL], {
      fromBeginning: true,
      autoCommitInterval: 120000,
      onMessage: () => sleep(200),
    });
    await waitFor(() => a.records.length >= 3, 25000, `consumer A to process 3 records (got ${a.records.length})`);
    const b = await startConsumer(rgroup, [REBAL], { fromBeginning: true, autoCommitInterval: 120000 });
    await waitFor(() => a.consumer.assignment().length === 1 && b.consumer.assignment().length === 1, 30000,
      `both consumers to hold one partition each (A ${a.consumer.assignment().length}, B ${b.consumer.assignment().length})`);
    assert(a.records.length < first.length,
      `consumer A processed all ${a.records.length} records before the rebalance; the check did not exercise the revoke path`);
    const all = () => [...a.records, ...b.records];
    const distinct = () => new Set(all().map(r => r.value)).size;
    await waitFor(() => distinct() >= first.length, 25000, `the ${first.length} records to be processed by A or B (got ${distinct()})`);
    const later = ['late-r0', 'late-r1'];
    await p.send({ topic: REBAL, messages: [{ partition: 0, value: later[0] }, { partition: 1, value: later[1] }] });
    await stopClient(p);
    await waitFor(() => all().filter(r => r.value.startsWith('late-')).length >= 2, 20000, 'the 2 records produced after the rebalance');
    await sleep(300);
    await b.consumer.commitOffsets();
    await a.consumer.commitOffsets();
    await stopClient(b.consumer);
    await stopClient(a.consumer);
    const counts = new Map();
    for (const r of all()) counts.set(r.value, (counts.get(r.value) || 0) + 1);
    const twice = [...counts].filter(([, n]) => n > 1).map(([v, n]) => `${v}x${n}`);
    assert(twice.length === 0,
      `${twice.length} records were processed more than once across the rebalance (${twice.slice(0, 6).join(', ')}): ` +
      "consumer A's revoke-path OffsetCommit did not take effect");
    assert(counts.size === first.length + later.length, `processed ${counts.size} distinct records, expected ${first.length + later.length}`);
    for (const part of [0, 1]) {
      const at = await committedOffset(admin, rgroup, REBAL, part);
      assert(at === '11', `partition ${part}: committed ${at}, expected 11`);
    }
  });

  // KIP-848: the same consume-commit-resume cycle over ConsumerGroupHeartbeat
  // (group.protocol=consumer) instead of JoinGroup/SyncGroup.
  await check('group_consumer_protocol', 60000, async () => {
    const ngroup = unique('ckjs-kip848-group');
    const p = producer();
    await p.connect();
    const first = [];
    for (let part = 0; part < 2; part++) {
      const messages = [];
      for (let i = 0; i < 5; i++) {
        first.push(`n${part}-${i}`);
        messages.push({ partition: part, value: `n${part}-${i}` });
      }
      await p.send({ topic: NEWPROTO, messages });
    }
    const a = await startConsumer(ngroup, [NEWPROTO], { fromBeginning: true, autoCommit: false, protocol: 'consumer' });
    await waitFor(() => a.records.length >= first.length, 25000, `consumer A to read ${first.length} records (got ${a.records.length})`);
    await a.consumer.commitOffsets();
    const { groups } = await admin.describeGroups([ngroup]);
    const g = groups[0];
    const { ConsumerGroupTypes, ConsumerGroupStates } = ckjs.KafkaJS;
    assert(g && g.type === ConsumerGroupTypes.CONSUMER, `described type ${g && g.type}, expected CONSUMER (${ConsumerGroupTypes.CONSUMER})`);
    assert(g.state === ConsumerGroupStates.STABLE, `described state ${g.state}, expected STABLE`);
    assert(g.members.length === 1, `described ${g.members.length} members, expected 1`);
    await stopClient(a.consumer);
    for (const part of [0, 1]) {
      const at = await committedOffset(admin, ngroup, NEWPROTO, part);
      assert(at === '5', `partition ${part}: committed ${at}, expected 5`);
    }
    await p.send({ topic: NEWPROTO, messages: [{ partition: 0, value: 'n-late-0' }, { partition: 1, value: 'n-late-1' }] });
    await stopClient(p);
    const b = await startConsumer(ngroup, [NEWPROTO], { fromBeginning: true, autoCommit: false, protocol: 'consumer' });
    await waitFor(() => b.records.length >= 2, 25000, `consumer B to read the 2 new records (got ${b.records.length})`);
    await sleep(300);
    await stopClient(b.consumer);
    assert(sameSet(values(b.records), ['n-late-0', 'n-late-1']), `consumer B read ${JSON.stringify(values(b.records))}, expected only the 2 new records`);
  });

  const txGroup = unique('ckjs-txn-group');
  let sendOffsetsProblem = 'transactions did not reach the sendOffsets step';
  const txnValues = { committed: ['c-0', 'c-1', 'c-2', 'c-3'], aborted: ['x-0', 'x-1', 'x-2', 'x-3'], marker: 'c-end' };
  await check('transactions', 60000, async () => {
    // The consume-transform-produce shape: a consumer of GROUPED in txGroup whose position the
    // transaction commits (sendOffsets takes the consumer, for its group metadata).
    const source = await startConsumer(txGroup, [GROUPED], { fromBeginning: true, autoCommit: false });
    await waitFor(() => source.records.length >= 7, 25000, `the source consumer to read 7 records (got ${source.records.length})`);
    const p = producer({ transactionalId: unique('ckjs-txn-id'), transactionTimeout: 30000 });
    await p.connect();

    const committed = await p.transaction();
    await committed.send({ topic: TXN, messages: txnValues.committed.map((v, i) => ({ partition: i % 2, value: v })) });
    await committed.sendOffsets({ consumer: source.consumer, topics: [{ topic: GROUPED, partitions: [{ partition: 0, offset: '7' }] }] });
    await committed.commit();
    // The commit's markers reach __consumer_offsets asynchronously (Kafka answers EndTxn once
    // the commit is prepared): the offset becomes visible shortly after, not necessarily at once.
    let at;
    try {
      await waitFor(async () => (at = await committedOffset(admin, txGroup, GROUPED, 0, true)) === '7', 10000,
        "the transaction's offset to become visible");
      sendOffsetsProblem = null;
    } catch (e) {
      sendOffsetsProblem = `10 s after commit the group's offset is ${at}, expected 7 (${e.message})`;
    }
    await stopClient(source.consumer);

    const aborted = await p.transaction();
    await aborted.send({ topic: TXN, messages: txnValues.aborted.map((v, i) => ({ partition: i % 2, value: v })) });
    await aborted.abort();

    const last = await p.transaction();
    await last.send({ topic: TXN, messages: [{ partition: 0, value: txnValues.marker }, { partition: 1, value: txnValues.marker }] });
    await last.commit();
    await stopClient(p);

    const c = await startConsumer(unique('ckjs-rc'), [TXN], { fromBeginning: true, readUncommitted: false });
    await waitFor(() => c.records.filter(r => r.value === txnValues.marker).length >= 2, 25000,
      `the last committed transaction's records on both partitions (read ${JSON.stringify(values(c.records))})`);
    await sleep(300);
    await stopClient(c.consumer);
    const got = values(c.records);
    const leaked = got.filter(v => v.startsWith('x-'));
    assert(leaked.length === 0, `a read_committed consumer saw aborted records ${JSON.stringify(leaked)}`);
    const want = [...txnValues.committed, txnValues.marker, txnValues.marker];
    assert(sameSet(got, want), `read_committed read ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    const offsets = await admin.fetchTopicOffsets(TXN);
    for (const x of offsets) {
      assert(Number(x.high) === 8, `partition ${x.partition} ends at ${x.high}, expected 8 (5 records, 3 transaction markers)`);
    }
  });

  await check('transactions_send_offsets', 5000, async () => {
    if (sendOffsetsProblem) throw new Error(sendOffsetsProblem);
  });

  await check('transactions_read_uncommitted', 30000, async () => {
    const c = await startConsumer(unique('ckjs-ru'), [TXN], { fromBeginning: true, readUncommitted: true });
    await waitFor(() => c.records.filter(r => r.value === txnValues.marker).length >= 2, 25000,
      `the marker records on both partitions (read ${JSON.stringify(values(c.records))})`);
    await sleep(300);
    await stopClient(c.consumer);
    const want = [...txnValues.committed, ...txnValues.aborted, txnValues.marker, txnValues.marker];
    assert(sameSet(values(c.records), want), `read_uncommitted read ${JSON.stringify(values(c.records))}, expected ${JSON.stringify(want)}`);
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
    assert(error && /unknown topic|UNKNOWN_TOPIC/i.test(`${error.code} ${error.type} ${error.message}`),
      `metadata for the deleted topic answered ${error ? `${error.code} ${error.message}` : 'without an error'}`);
  });
}

runMain(main);
