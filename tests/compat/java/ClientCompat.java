// The Java Kafka client (kafka-clients from Maven Central) against Sluice, for the client
// compatibility matrix. Written against the API that kafka-clients 2.8 through 4.x share and
// compiled once (against 2.8.2); the test runs the same class with each version's jars.
// Where the API changed between those versions (DescribeTopicsResult.all() became
// allTopicNames(); ConsumerGroupDescription.state() became groupState()) it goes through
// reflection.
//
// Usage: java -cp lib-<v>/*:build/client ClientCompat BOOTSTRAP NAME_PREFIX DEADLINE_SECONDS
// Prints one line per check, "CHECK <name> ok" or "CHECK <name> FAIL <reason>"; every client
// call is bounded (request.timeout.ms, default.api.timeout.ms, max.block.ms, explicit get()
// timeouts), and a watchdog reports the unfinished checks and ends the JVM at the deadline.

import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientCompat extends Checks {
    static final List<String> CHECKS = Arrays.asList(
        "admin_create_topic", "admin_describe_topic", "produce", "produce_idempotent",
        "consume_from_beginning", "consume_from_end", "group_commit_and_resume",
        "admin_describe_group", "transactions", "transactions_send_offsets", "admin_delete_topic");
    static final long WAIT_MS = 20_000; // the bound of each wait for records or futures

    static String bootstrap, topic, groupTopic, txnIn, txnOut, group, txnGroup, prefix;

    // ---- client configuration ----

    static Properties common(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", prefix + "-" + clientId);
        p.put("request.timeout.ms", "10000");
        return p;
    }

    static AdminClient admin() {
        Properties p = common("admin");
        p.put("default.api.timeout.ms", "15000");
        return AdminClient.create(p);
    }

    static KafkaProducer<String, String> producer(String clientId, Map<String, String> extra) {
        Properties p = common(clientId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "15000");
        p.put("delivery.timeout.ms", "20000");
        p.put("linger.ms", "5");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaProducer<String, String> plainProducer(String clientId) {
        Map<String, String> extra = new HashMap<>();
        extra.put("enable.idempotence", "false"); // the 3.0+ default is true
        extra.put("acks", "1");
        return producer(clientId, extra);
    }

    static KafkaConsumer<String, String> consumer(String clientId, Map<String, String> extra) {
        Properties p = common(clientId);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("default.api.timeout.ms", "15000");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static Map<String, String> kv(String... pairs) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < pairs.length; i += 2) m.put(pairs[i], pairs[i + 1]);
        return m;
    }

    static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(WAIT_MS, TimeUnit.MILLISECONDS);
    }

    /** Polls until `want` records arrived or the wait ends; returns what arrived. */
    static List<ConsumerRecord<String, String>> pollFor(Consumer<String, String> c, int want, long waitMs) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + waitMs;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    static List<Long> offsets(List<ConsumerRecord<String, String>> records) {
        List<Long> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : records) out.add(r.offset());
        return out;
    }

    static List<Long> range(long from, long to) {
        List<Long> out = new ArrayList<>();
        for (long i = from; i < to; i++) out.add(i);
        return out;
    }

    static List<String> values(List<ConsumerRecord<String, String>> records) {
        List<String> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : records) out.add(r.value());
        return out;
    }

    /** Sends the records and waits for every acknowledgement; returns their offsets. */
    static List<Long> sendAll(Producer<String, String> p, List<ProducerRecord<String, String>> records) throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
        for (ProducerRecord<String, String> r : records) acks.add(p.send(r));
        p.flush();
        List<Long> out = new ArrayList<>();
        for (java.util.concurrent.Future<RecordMetadata> f : acks) out.add(f.get(WAIT_MS, TimeUnit.MILLISECONDS).offset());
        return out;
    }

    // ---- API differences between 2.8 and 4.x, through reflection ----

    @SuppressWarnings("unchecked")
    static Map<String, TopicDescription> describeTopics(AdminClient admin, Collection<String> names) throws Exception {
        DescribeTopicsResult r = admin.describeTopics(names);
        Method m;
        try {
            m = r.getClass().getMethod("allTopicNames"); // 3.1+; all() is gone in 4.0
        } catch (NoSuchMethodException e) {
            m = r.getClass().getMethod("all");
        }
        return get((KafkaFuture<Map<String, TopicDescription>>) m.invoke(r));
    }

    static String groupState(ConsumerGroupDescription d) throws Exception {
        Method m;
        try {
            m = d.getClass().getMethod("groupState"); // 4.0+; state() is deprecated there
        } catch (NoSuchMethodException e) {
            m = d.getClass().getMethod("state");
        }
        return String.valueOf(m.invoke(d));
    }

    // ---- the checks ----

    static final int PLAIN = 50, IDEMPOTENT = 50, LATE = 5, GROUP_RECORDS = 20, GROUP_FIRST = 10;

    static void createTopics() throws Exception {
        try (AdminClient admin = admin()) {
            get(admin.createTopics(Arrays.asList(
                new NewTopic(topic, 3, (short) 1), new NewTopic(groupTopic, 1, (short) 1),
                new NewTopic(txnIn, 1, (short) 1), new NewTopic(txnOut, 1, (short) 1))).all());
            Set<String> names = get(admin.listTopics().names());
            for (String t : Arrays.asList(topic, groupTopic, txnIn, txnOut)) require(names.contains(t), "listTopics lacks " + t + ": " + names);
            // Creating it again is refused with TopicExistsException.
            try {
                get(admin.createTopics(Collections.singletonList(new NewTopic(topic, 3, (short) 1))).all());
                throw new CheckFailed("creating " + topic + " a second time succeeded");
            } catch (java.util.concurrent.ExecutionException e) {
                require(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException,
                    "second create: expected TopicExistsException, got " + e.getCause());
            }
        }
    }

    static void describeTopic() throws Exception {
        try (AdminClient admin = admin()) {
            Map<String, TopicDescription> d = describeTopics(admin, Arrays.asList(topic, groupTopic));
            TopicDescription main = d.get(topic);
            require(main != null && main.name().equals(topic), "no description of " + topic + ": " + d);
            require(!main.isInternal(), "topic described as internal");
            require(main.partitions().size() == 3, "3 partitions expected: " + main.partitions());
            for (int i = 0; i < 3; i++) {
                TopicPartitionInfo p = main.partitions().get(i);
                require(p.partition() == i, "partition order: " + main.partitions());
                require(p.leader() != null && !p.leader().isEmpty(), "partition " + i + " has no leader: " + p);
                require(p.replicas().size() == 1 && p.isr().size() == 1, "partition " + i + " replicas/isr: " + p);
            }
            require(d.get(groupTopic).partitions().size() == 1, "1 partition expected for " + groupTopic);
            Collection<org.apache.kafka.common.Node> nodes = get(admin.describeCluster().nodes());
            require(nodes.size() == 1, "describeCluster: one node expected: " + nodes);
            require(nodes.iterator().next().id() == main.partitions().get(0).leader().id(), "the leader is the cluster's node");
            // A topic that does not exist: UnknownTopicOrPartitionException.
            try {
                describeTopics(admin, Collections.singletonList(prefix + "-missing"));
                throw new CheckFailed("describing a missing topic succeeded");
            } catch (java.util.concurrent.ExecutionException e) {
                require(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException,
                    "missing topic: expected UnknownTopicOrPartitionException, got " + e.getCause());
            }
        }
    }

    static void produce() throws Exception {
        List<ProducerRecord<String, String>> records = new ArrayList<>();
        for (int i = 0; i < PLAIN; i++) {
            ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, "key-" + i, "plain-" + i);
            r.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
            records.add(r);
        }
        try (KafkaProducer<String, String> p = plainProducer("plain")) {
            List<Long> got = sendAll(p, records);
            require(got.equals(range(0, PLAIN)), "offsets 0.." + (PLAIN - 1) + " expected, got " + got);
        }
    }

    static void produceIdempotent() throws Exception {
        List<ProducerRecord<String, String>> records = new ArrayList<>();
        for (int i = 0; i < IDEMPOTENT; i++) records.add(new ProducerRecord<>(topic, 1, "key-" + i, "idem-" + i));
        Map<String, String> extra = kv("enable.idempotence", "true", "acks", "all", "max.in.flight.requests.per.connection", "5");
        try (KafkaProducer<String, String> p = producer("idempotent", extra)) {
            List<Long> got = sendAll(p, records);
            require(got.equals(range(0, IDEMPOTENT)), "offsets 0.." + (IDEMPOTENT - 1) + " expected, got " + got);
        }
        // Read back: each record once, in order.
        TopicPartition tp = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = consumer("idempotent-check", kv("auto.offset.reset", "earliest"))) {
            c.assign(Collections.singletonList(tp));
            List<ConsumerRecord<String, String>> got = pollFor(c, IDEMPOTENT, WAIT_MS);
            got.addAll(pollFor(c, 1, 300)); // nothing more may follow
            List<String> want = new ArrayList<>();
            for (int i = 0; i < IDEMPOTENT; i++) want.add("idem-" + i);
            require(values(got).equals(want), "read back " + got.size() + " records: " + values(got));
        }
    }

    static void consumeFromBeginning() throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer("from-beginning", kv("auto.offset.reset", "earliest"))) {
            c.assign(Collections.singletonList(tp));
            require(c.beginningOffsets(Collections.singletonList(tp)).get(tp) == 0, "beginning offset 0");
            require(c.endOffsets(Collections.singletonList(tp)).get(tp) == PLAIN, "end offset " + PLAIN);
            List<ConsumerRecord<String, String>> got = pollFor(c, PLAIN, WAIT_MS);
            require(got.size() == PLAIN, PLAIN + " records expected, got " + got.size());
            for (int i = 0; i < PLAIN; i++) {
                ConsumerRecord<String, String> r = got.get(i);
                require(r.offset() == i, "record " + i + " at offset " + r.offset());
                require(("key-" + i).equals(r.key()) && ("plain-" + i).equals(r.value()), "record " + i + ": " + r.key() + "=" + r.value());
                require(r.headers().lastHeader("seq") != null
                        && new String(r.headers().lastHeader("seq").value(), StandardCharsets.UTF_8).equals(Integer.toString(i)),
                    "record " + i + " header seq");
                require(r.timestamp() > 0, "record " + i + " timestamp " + r.timestamp());
            }
            // seekToBeginning goes back to the first record.
            c.seekToBeginning(Collections.singletonList(tp));
            List<ConsumerRecord<String, String>> again = pollFor(c, 1, WAIT_MS);
            require(!again.isEmpty() && again.get(0).offset() == 0, "after seekToBeginning: " + offsets(again));
        }
    }

    static void consumeFromEnd() throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer("from-end", kv("auto.offset.reset", "latest"))) {
            c.assign(Collections.singletonList(tp));
            long position = c.position(tp, Duration.ofMillis(WAIT_MS)); // the reset to "latest" happens here
            require(position == PLAIN, "position at the end (" + PLAIN + ") expected, got " + position);
            require(pollFor(c, 1, 500).isEmpty(), "records before anything new was produced");
            List<ProducerRecord<String, String>> late = new ArrayList<>();
            for (int i = 0; i < LATE; i++) late.add(new ProducerRecord<>(topic, 0, "late-" + i, "late-" + i));
            try (KafkaProducer<String, String> p = plainProducer("late")) {
                sendAll(p, late);
            }
            List<ConsumerRecord<String, String>> got = pollFor(c, LATE, WAIT_MS);
            got.addAll(pollFor(c, 1, 300));
            require(offsets(got).equals(range(PLAIN, PLAIN + LATE)), "offsets " + PLAIN + ".." + (PLAIN + LATE - 1) + " expected, got " + offsets(got));
            for (int i = 0; i < LATE; i++) require(got.get(i).value().equals("late-" + i), "late record " + i + ": " + got.get(i).value());
        }
    }

    static Map<String, String> groupConsumer(String resetPolicy) {
        return kv("group.id", group, "auto.offset.reset", resetPolicy, "max.poll.records", "4",
                  "session.timeout.ms", "10000", "heartbeat.interval.ms", "1000");
    }

    // admin_describe_group runs inside the group check while B is a member, and
    // transactions_send_offsets inside the transactions check: null while not reached, "" when
    // it passed, else the reason.
    static volatile String groupResult, sendOffsetsResult;

    static void groupCommitAndResume() throws Exception {
        TopicPartition tp = new TopicPartition(groupTopic, 0);
        List<ProducerRecord<String, String>> records = new ArrayList<>();
        for (int i = 0; i < GROUP_RECORDS; i++) records.add(new ProducerRecord<>(groupTopic, 0, "g" + i, "g" + i));
        try (KafkaProducer<String, String> p = plainProducer("group-input")) {
            sendAll(p, records);
        }
        // A reads the first GROUP_FIRST records (it may have fetched more), commits exactly
        // GROUP_FIRST and leaves.
        try (KafkaConsumer<String, String> a = consumer("member-a", groupConsumer("earliest"))) {
            a.subscribe(Collections.singletonList(groupTopic));
            List<ConsumerRecord<String, String>> got = pollFor(a, GROUP_FIRST, WAIT_MS);
            require(got.size() >= GROUP_FIRST, "A read " + got.size() + " of the first " + GROUP_FIRST + " records");
            require(offsets(got.subList(0, GROUP_FIRST)).equals(range(0, GROUP_FIRST)), "A read offsets " + offsets(got));
            a.commitSync(Collections.singletonMap(tp, new OffsetAndMetadata(GROUP_FIRST, "by A")), Duration.ofMillis(WAIT_MS));
            OffsetAndMetadata committed = a.committed(Collections.singleton(tp), Duration.ofMillis(WAIT_MS)).get(tp);
            require(committed != null && committed.offset() == GROUP_FIRST && "by A".equals(committed.metadata()),
                "A's committed offset reads back as " + committed);
        }
        // B, in the same group with no reset policy, starts exactly at A's commit.
        try (KafkaConsumer<String, String> b = consumer("member-b", groupConsumer("none"))) {
            b.subscribe(Collections.singletonList(groupTopic));
            List<ConsumerRecord<String, String>> got = pollFor(b, GROUP_RECORDS - GROUP_FIRST, WAIT_MS);
            got.addAll(pollFor(b, 1, 300));
            require(offsets(got).equals(range(GROUP_FIRST, GROUP_RECORDS)),
                "B read offsets " + offsets(got) + ", expected " + GROUP_FIRST + ".." + (GROUP_RECORDS - 1));
            b.commitSync(Duration.ofMillis(WAIT_MS));
            groupResult = describeGroupWith(b);
        }
        if (groupResult.isEmpty()) groupResult = describeGroupEmpty();
    }

    /** The group while B is its only member: Stable, B's client id, B's assignment, B's commit. */
    static String describeGroupWith(KafkaConsumer<String, String> b) {
        running = "admin_describe_group";
        try (AdminClient admin = admin()) {
            ConsumerGroupDescription d = get(admin.describeConsumerGroups(Collections.singletonList(group)).all()).get(group);
            require(d != null && d.groupId().equals(group), "no description of " + group);
            require(groupState(d).equalsIgnoreCase("Stable"), "state " + groupState(d) + ", expected Stable");
            require(!d.isSimpleConsumerGroup(), "described as a simple consumer group");
            require(d.members().size() == 1, "one member expected: " + d.members());
            MemberDescription m = d.members().iterator().next();
            require(m.clientId().equals(prefix + "-member-b"), "member client id " + m.clientId());
            require(m.assignment().topicPartitions().equals(Collections.singleton(new TopicPartition(groupTopic, 0))),
                "member assignment " + m.assignment().topicPartitions());
            require(d.coordinator() != null && !d.coordinator().isEmpty(), "no coordinator");
            require("range".equals(d.partitionAssignor()), "assignor " + d.partitionAssignor() + ", expected range (the consumer's first)");
            Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            OffsetAndMetadata o = offsets.get(new TopicPartition(groupTopic, 0));
            require(o != null && o.offset() == GROUP_RECORDS, "listConsumerGroupOffsets: " + offsets);
            Collection<ConsumerGroupListing> listed = get(admin.listConsumerGroups().all());
            boolean found = false;
            for (ConsumerGroupListing l : listed) found |= l.groupId().equals(group);
            require(found, "listConsumerGroups lacks " + group + ": " + listed);
            return "";
        } catch (Throwable t) {
            t.printStackTrace();
            return describe(t);
        }
    }

    /** After B left: the group is Empty with no members, its offsets kept. */
    static String describeGroupEmpty() {
        try (AdminClient admin = admin()) {
            long deadline = System.currentTimeMillis() + 10_000;
            String last = "";
            while (System.currentTimeMillis() < deadline) {
                ConsumerGroupDescription d = get(admin.describeConsumerGroups(Collections.singletonList(group)).all()).get(group);
                last = groupState(d) + " with " + d.members().size() + " member(s)";
                if (groupState(d).equalsIgnoreCase("Empty") && d.members().isEmpty()) return "";
                Thread.sleep(100);
            }
            return "after the last member left: " + last + ", expected Empty with 0 members";
        } catch (Throwable t) {
            t.printStackTrace();
            return describe(t);
        }
    }

    static void transactions() throws Exception {
        TopicPartition in = new TopicPartition(txnIn, 0), out = new TopicPartition(txnOut, 0);
        List<ProducerRecord<String, String>> input = new ArrayList<>();
        for (int i = 0; i < 10; i++) input.add(new ProducerRecord<>(txnIn, 0, "in" + i, "in" + i));
        try (KafkaProducer<String, String> p = plainProducer("txn-input")) {
            sendAll(p, input);
        }
        Map<String, String> cx = kv("group.id", txnGroup, "auto.offset.reset", "earliest", "isolation.level", "read_committed");
        Map<String, String> px = kv("transactional.id", prefix + "-txn", "enable.idempotence", "true", "acks", "all",
                                    "transaction.timeout.ms", "30000");
        try (KafkaConsumer<String, String> c = consumer("txn-reader", cx);
             KafkaProducer<String, String> p = producer("txn-writer", px)) {
            c.subscribe(Collections.singletonList(txnIn));
            List<ConsumerRecord<String, String>> read = pollFor(c, 10, WAIT_MS);
            require(read.size() == 10, "the transactional reader got " + read.size() + " of 10 input records");
            p.initTransactions();
            // 1: read-process-write, committed with the consumer's offsets.
            p.beginTransaction();
            for (ConsumerRecord<String, String> r : read) p.send(new ProducerRecord<>(txnOut, 0, r.key(), "out-" + r.value()));
            p.sendOffsetsToTransaction(Collections.singletonMap(in, new OffsetAndMetadata(10)), c.groupMetadata());
            p.commitTransaction();
            // 2: written, then aborted, with an offset commit that must not take effect.
            p.beginTransaction();
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(txnOut, 0, "aborted" + i, "aborted-" + i));
            p.flush();
            p.sendOffsetsToTransaction(Collections.singletonMap(in, new OffsetAndMetadata(3)), c.groupMetadata());
            p.abortTransaction();
            // 3: committed after the abort.
            p.beginTransaction();
            for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(txnOut, 0, "after" + i, "after-" + i));
            p.commitTransaction();
            try {
                OffsetAndMetadata committed = c.committed(Collections.singleton(in), Duration.ofMillis(WAIT_MS)).get(in);
                require(committed != null && committed.offset() == 10,
                    "the group's offset should be 10 (committed transaction), not 3 (aborted): " + committed);
                sendOffsetsResult = "";
            } catch (Throwable t) {
                t.printStackTrace();
                sendOffsetsResult = describe(t);
            }
        }
        List<String> want = new ArrayList<>();
        for (int i = 0; i < 10; i++) want.add("out-in" + i);
        for (int i = 0; i < 3; i++) want.add("after-" + i);
        try (KafkaConsumer<String, String> c = consumer("txn-committed", kv("auto.offset.reset", "earliest", "isolation.level", "read_committed"))) {
            c.assign(Collections.singletonList(out));
            long lso = c.endOffsets(Collections.singletonList(out)).get(out);
            // 10 + 5 aborted + 3 records, and 3 markers (commit, abort, commit).
            require(lso == 21, "read_committed end offset (the LSO) 21 expected, got " + lso);
            List<ConsumerRecord<String, String>> got = pollFor(c, want.size(), WAIT_MS);
            got.addAll(pollFor(c, 1, 500));
            require(values(got).equals(want), "read_committed saw " + values(got) + ", expected " + want);
        }
        try (KafkaConsumer<String, String> c = consumer("txn-uncommitted", kv("auto.offset.reset", "earliest", "isolation.level", "read_uncommitted"))) {
            c.assign(Collections.singletonList(out));
            List<ConsumerRecord<String, String>> got = pollFor(c, 18, WAIT_MS);
            int aborted = 0;
            for (ConsumerRecord<String, String> r : got) if (r.value().startsWith("aborted-")) aborted++;
            require(got.size() == 18 && aborted == 5, "read_uncommitted saw " + got.size() + " records (" + aborted + " aborted), expected 18 (5)");
        }
    }

    static void deleteTopics() throws Exception {
        List<String> all = Arrays.asList(topic, groupTopic, txnIn, txnOut);
        try (AdminClient admin = admin()) {
            get(admin.deleteTopics(all).all());
            long deadline = System.currentTimeMillis() + 15_000;
            Set<String> left = new HashSet<>(all);
            while (System.currentTimeMillis() < deadline) {
                left = new HashSet<>(all);
                left.retainAll(get(admin.listTopics().names()));
                if (left.isEmpty()) break;
                Thread.sleep(100);
            }
            require(left.isEmpty(), "still listed after deleting: " + left);
            try {
                describeTopics(admin, Collections.singletonList(topic));
                throw new CheckFailed("a deleted topic is still described");
            } catch (java.util.concurrent.ExecutionException e) {
                require(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException,
                    "deleted topic: expected UnknownTopicOrPartitionException, got " + e.getCause());
            }
        }
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        long deadlineSeconds = Long.parseLong(args[2]);
        topic = prefix + "-main";
        groupTopic = prefix + "-group";
        txnIn = prefix + "-txn-in";
        txnOut = prefix + "-txn-out";
        group = prefix + "-g";
        txnGroup = prefix + "-txn-g";
        System.err.println("INFO kafka-clients from " + KafkaProducer.class.getProtectionDomain().getCodeSource().getLocation());
        startWatchdog(CHECKS, deadlineSeconds);

        run("admin_create_topic", ClientCompat::createTopics);
        run("admin_describe_topic", ClientCompat::describeTopic, "admin_create_topic");
        run("produce", ClientCompat::produce, "admin_create_topic");
        run("produce_idempotent", ClientCompat::produceIdempotent, "admin_create_topic");
        run("consume_from_beginning", ClientCompat::consumeFromBeginning, "produce");
        run("consume_from_end", ClientCompat::consumeFromEnd, "produce");
        run("group_commit_and_resume", ClientCompat::groupCommitAndResume, "admin_create_topic");
        after("admin_describe_group", groupResult, "group_commit_and_resume");
        run("transactions", ClientCompat::transactions, "admin_create_topic");
        after("transactions_send_offsets", sendOffsetsResult, "transactions");
        run("admin_delete_topic", ClientCompat::deleteTopics, "admin_create_topic");
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(0); // no client thread may keep the JVM alive
    }
}
