// Spring Kafka (spring-kafka from Maven Central, with the kafka-clients it depends on) against
// Sluice, for the client compatibility matrix, in a plain Spring AnnotationConfigApplicationContext:
// KafkaAdmin creating the NewTopic beans, KafkaTemplate sending, @KafkaListener receiving in a
// consumer group, a second context's listener in the same group resuming at the committed
// offsets, KafkaTemplate.executeInTransaction and a KafkaTransactionManager (commit and
// rollback) seen by a read_committed listener, and a listener whose container runs each
// delivery in a Kafka transaction (consume-process-produce with the offsets in the transaction).
//
// Usage: java -cp lib-spring-kafka-<v>/*:build/spring SpringCompat BOOTSTRAP NAME_PREFIX DEADLINE_SECONDS
// Prints "CHECK <name> ok" or "CHECK <name> FAIL <reason>" lines; every wait is bounded and a
// watchdog reports the unfinished checks and ends the JVM at the deadline.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafka;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.*;
import org.springframework.kafka.support.SendResult;
import org.springframework.kafka.transaction.KafkaTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

public class SpringCompat extends Checks {
    static final List<String> CHECKS = Arrays.asList(
        "spring_admin_create_topic", "spring_template_send", "spring_listener_receive",
        "spring_transactions", "spring_listener_in_transaction", "spring_listener_commit_resume");
    static final long WAIT_MS = 30_000;
    static final int FIRST = 20, SECOND = 10, FORWARD = 5;

    static String bootstrap, prefix, topic, group, txnTopic, txnGroup, fwdIn, fwdOut, fwdGroup;

    // What the listeners received; the group listener's queue is replaced between contexts.
    static volatile BlockingQueue<ConsumerRecord<String, String>> groupReceived = new LinkedBlockingQueue<>();
    static final BlockingQueue<ConsumerRecord<String, String>> txnReceived = new LinkedBlockingQueue<>();

    // ---- configuration shared by the contexts ----

    static Map<String, Object> clientProps() {
        Map<String, Object> p = new HashMap<>();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", 10000);
        return p;
    }

    static Map<String, Object> producerProps() {
        Map<String, Object> p = clientProps();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 15000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20000);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        return p;
    }

    static Map<String, Object> consumerProps(String isolation) {
        Map<String, Object> p = clientProps();
        p.put("default.api.timeout.ms", 15000);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000);
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
        return p;
    }

    static AdminClient adminClient() {
        Map<String, Object> p = clientProps();
        p.put("default.api.timeout.ms", 15000);
        return AdminClient.create(p);
    }

    @Configuration
    @EnableKafka
    public static class Base {
        @Bean
        public KafkaAdmin kafkaAdmin() {
            Map<String, Object> p = clientProps();
            p.put("default.api.timeout.ms", 15000);
            KafkaAdmin admin = new KafkaAdmin(p);
            admin.setFatalIfBrokerNotAvailable(true); // a broker it cannot use fails the context
            admin.setOperationTimeout(15);
            return admin;
        }

        @Bean
        public NewTopic mainTopic() {
            return TopicBuilder.name(topic).partitions(2).replicas(1).build();
        }

        @Bean
        public NewTopic txnTopic() {
            return TopicBuilder.name(txnTopic).partitions(1).replicas(1).build();
        }

        @Bean
        public NewTopic forwardIn() {
            return TopicBuilder.name(fwdIn).partitions(1).replicas(1).build();
        }

        @Bean
        public NewTopic forwardOut() {
            return TopicBuilder.name(fwdOut).partitions(1).replicas(1).build();
        }

        @Bean
        public ProducerFactory<String, String> producerFactory() {
            Map<String, Object> p = producerProps();
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            return new DefaultKafkaProducerFactory<>(p);
        }

        @Bean
        public KafkaTemplate<String, String> kafkaTemplate(@Qualifier("producerFactory") ProducerFactory<String, String> producerFactory) {
            return new KafkaTemplate<>(producerFactory);
        }

        @Bean
        public ProducerFactory<String, String> txProducerFactory() {
            DefaultKafkaProducerFactory<String, String> f = new DefaultKafkaProducerFactory<>(producerProps());
            f.setTransactionIdPrefix(prefix + "-tx-");
            return f;
        }

        @Bean
        public KafkaTemplate<String, String> txTemplate(@Qualifier("txProducerFactory") ProducerFactory<String, String> f) {
            return new KafkaTemplate<>(f);
        }

        @Bean
        public KafkaTransactionManager<String, String> kafkaTransactionManager(@Qualifier("txProducerFactory") ProducerFactory<String, String> f) {
            return new KafkaTransactionManager<>(f);
        }

        @Bean
        public ConcurrentKafkaListenerContainerFactory<String, String> kafkaListenerContainerFactory() {
            ConcurrentKafkaListenerContainerFactory<String, String> f = new ConcurrentKafkaListenerContainerFactory<>();
            f.setConsumerFactory(new DefaultKafkaConsumerFactory<>(consumerProps("read_uncommitted")));
            f.getContainerProperties().setPollTimeout(500);
            return f;
        }

        @Bean
        public ConcurrentKafkaListenerContainerFactory<String, String> readCommittedFactory() {
            ConcurrentKafkaListenerContainerFactory<String, String> f = new ConcurrentKafkaListenerContainerFactory<>();
            f.setConsumerFactory(new DefaultKafkaConsumerFactory<>(consumerProps("read_committed")));
            f.getContainerProperties().setPollTimeout(500);
            return f;
        }

        /** Each delivery runs in a Kafka transaction that also carries the consumed offsets. */
        @Bean
        public ConcurrentKafkaListenerContainerFactory<String, String> transactionalFactory(KafkaTransactionManager<String, String> tm) {
            ConcurrentKafkaListenerContainerFactory<String, String> f = new ConcurrentKafkaListenerContainerFactory<>();
            f.setConsumerFactory(new DefaultKafkaConsumerFactory<>(consumerProps("read_committed")));
            f.getContainerProperties().setPollTimeout(500);
            f.getContainerProperties().setKafkaAwareTransactionManager(tm);
            return f;
        }
    }

    public static class GroupListener {
        @KafkaListener(id = "compat-group-listener", topics = "${compat.topic}", groupId = "${compat.group}")
        public void listen(ConsumerRecord<String, String> r) {
            groupReceived.add(r);
        }
    }

    public static class TxnReader {
        @KafkaListener(id = "compat-txn-reader", topics = "${compat.txn}", groupId = "${compat.txngroup}",
                       containerFactory = "readCommittedFactory")
        public void listen(ConsumerRecord<String, String> r) {
            txnReceived.add(r);
        }
    }

    public static class Forwarder {
        @Autowired
        @Qualifier("txTemplate")
        KafkaTemplate<String, String> txTemplate;

        @KafkaListener(id = "compat-forwarder", topics = "${compat.fwd.in}", groupId = "${compat.fwd.group}",
                       containerFactory = "transactionalFactory")
        public void forward(ConsumerRecord<String, String> r) {
            txTemplate.send(fwdOut, r.key(), "fwd-" + r.value()); // joins the container's transaction
        }
    }

    // ---- helpers ----

    static List<ConsumerRecord<String, String>> take(BlockingQueue<ConsumerRecord<String, String>> q, int want, long waitMs)
            throws InterruptedException {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + waitMs;
        while (got.size() < want) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) break;
            ConsumerRecord<String, String> r = q.poll(left, TimeUnit.MILLISECONDS);
            if (r != null) got.add(r);
        }
        return got;
    }

    static List<String> values(Collection<ConsumerRecord<String, String>> records) {
        List<String> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : records) out.add(r.value());
        return out;
    }

    static Map<TopicPartition, Long> endOffsets(String t, int partitions) throws Exception {
        Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
        for (int i = 0; i < partitions; i++) ask.put(new TopicPartition(t, i), OffsetSpec.latest());
        Map<TopicPartition, Long> out = new HashMap<>();
        try (AdminClient admin = adminClient()) {
            admin.listOffsets(ask).all().get(WAIT_MS, TimeUnit.MILLISECONDS).forEach((tp, info) -> out.put(tp, info.offset()));
        }
        return out;
    }

    static Map<TopicPartition, Long> committed(String g) throws Exception {
        Map<TopicPartition, Long> out = new HashMap<>();
        try (AdminClient admin = adminClient()) {
            admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata().get(WAIT_MS, TimeUnit.MILLISECONDS)
                .forEach((tp, o) -> { if (o != null) out.put(tp, o.offset()); });
        }
        return out;
    }

    /** Waits until the group's committed offsets are `want` (a container commits after delivering). */
    static void awaitCommitted(String g, Map<TopicPartition, Long> want) throws Exception {
        long deadline = System.currentTimeMillis() + 15_000;
        Map<TopicPartition, Long> got = committed(g);
        while (!got.equals(want) && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
            got = committed(g);
        }
        require(got.equals(want), "group " + g + " committed " + got + ", expected " + want);
    }

    // ---- the checks ----

    static AnnotationConfigApplicationContext first;
    static final Map<String, Long> sentOffsets = new HashMap<>(); // value -> "partition:offset" packed

    static void adminCreatedTopics() throws Exception {
        KafkaAdmin admin = first.getBean(KafkaAdmin.class);
        Map<String, TopicDescription> d = admin.describeTopics(topic, txnTopic, fwdIn, fwdOut);
        require(d.get(topic) != null && d.get(topic).partitions().size() == 2, "KafkaAdmin describes " + d.get(topic));
        for (String t : Arrays.asList(txnTopic, fwdIn, fwdOut))
            require(d.get(t) != null && d.get(t).partitions().size() == 1, "KafkaAdmin describes " + d.get(t));
    }

    @SuppressWarnings("unchecked")
    static void templateSend() throws Exception {
        KafkaTemplate<String, String> template = first.getBean("kafkaTemplate", KafkaTemplate.class);
        List<CompletableFuture<SendResult<String, String>>> acks = new ArrayList<>();
        for (int i = 0; i < FIRST; i++) acks.add(template.send(topic, "k" + i, "first-" + i));
        template.flush();
        Map<Integer, List<Long>> byPartition = new TreeMap<>();
        for (int i = 0; i < FIRST; i++) {
            SendResult<String, String> r = acks.get(i).get(WAIT_MS, TimeUnit.MILLISECONDS);
            require(r.getProducerRecord().value().equals("first-" + i), "send result " + i + " names its record");
            byPartition.computeIfAbsent(r.getRecordMetadata().partition(), p -> new ArrayList<>()).add(r.getRecordMetadata().offset());
            sentOffsets.put("first-" + i, ((long) r.getRecordMetadata().partition() << 32) | r.getRecordMetadata().offset());
        }
        for (Map.Entry<Integer, List<Long>> e : byPartition.entrySet()) {
            List<Long> offs = e.getValue();
            for (int j = 0; j < offs.size(); j++) require(offs.get(j) == j, "partition " + e.getKey() + " offsets " + offs);
        }
    }

    static void listenerReceive() throws Exception {
        List<ConsumerRecord<String, String>> got = take(groupReceived, FIRST, WAIT_MS);
        got.addAll(take(groupReceived, 1, 500));
        Set<String> want = new TreeSet<>(), seen = new TreeSet<>();
        for (int i = 0; i < FIRST; i++) want.add("first-" + i);
        for (ConsumerRecord<String, String> r : got) {
            require(seen.add(r.value()), "received twice: " + r.value());
            Long at = sentOffsets.get(r.value());
            require(at != null && at == (((long) r.partition() << 32) | r.offset()),
                r.value() + " received at " + r.partition() + "/" + r.offset() + ", not where it was sent");
        }
        require(seen.equals(want), "the listener received " + seen.size() + " of " + FIRST + ": " + seen);
        // The listener is the group's one member, with both partitions.
        try (AdminClient admin = adminClient()) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(Collections.singletonList(group)).all()
                .get(WAIT_MS, TimeUnit.MILLISECONDS).get(group);
            require(d.members().size() == 1, "group members " + d.members());
            Set<TopicPartition> both = new HashSet<>(Arrays.asList(new TopicPartition(topic, 0), new TopicPartition(topic, 1)));
            require(d.members().iterator().next().assignment().topicPartitions().equals(both),
                "member assignment " + d.members().iterator().next().assignment());
        }
    }

    @SuppressWarnings("unchecked")
    static void transactions() throws Exception {
        KafkaTemplate<String, String> tx = first.getBean("txTemplate", KafkaTemplate.class);
        KafkaTransactionManager<String, String> tm = first.getBean(KafkaTransactionManager.class);
        TransactionTemplate tt = new TransactionTemplate(tm);
        // executeInTransaction: committed, then rolled back by an exception.
        tx.executeInTransaction(t -> {
            for (int i = 0; i < 3; i++) t.send(txnTopic, "c1", "commit-1-" + i);
            return null;
        });
        try {
            tx.executeInTransaction(t -> {
                for (int i = 0; i < 3; i++) t.send(txnTopic, "r1", "rollback-1-" + i);
                t.flush(); // written to the log before the abort
                throw new IllegalStateException("roll back");
            });
            throw new CheckFailed("executeInTransaction did not rethrow the callback's exception");
        } catch (IllegalStateException expected) {
        }
        // KafkaTransactionManager: the template joins the managed transaction.
        tt.executeWithoutResult(status -> {
            for (int i = 0; i < 3; i++) tx.send(txnTopic, "c2", "commit-2-" + i);
        });
        tt.executeWithoutResult(status -> {
            for (int i = 0; i < 3; i++) tx.send(txnTopic, "r2", "rollback-2-" + i);
            tx.flush();
            status.setRollbackOnly();
        });
        tx.executeInTransaction(t -> t.send(txnTopic, "end", "end"));
        List<String> want = Arrays.asList("commit-1-0", "commit-1-1", "commit-1-2", "commit-2-0", "commit-2-1", "commit-2-2", "end");
        List<ConsumerRecord<String, String>> got = take(txnReceived, want.size(), WAIT_MS);
        got.addAll(take(txnReceived, 1, 500));
        require(values(got).equals(want), "the read_committed listener received " + values(got) + ", expected " + want);
        // The rolled-back records were written (a read_uncommitted consumer sees them).
        Map<String, Object> p = consumerProps("read_uncommitted");
        try (Consumer<String, String> c = new DefaultKafkaConsumerFactory<String, String>(p).createConsumer()) {
            TopicPartition tp = new TopicPartition(txnTopic, 0);
            c.assign(Collections.singletonList(tp));
            c.seekToBeginning(Collections.singletonList(tp));
            List<String> all = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (all.size() < 13 && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) all.add(r.value());
            long rolledBack = all.stream().filter(v -> v.startsWith("rollback-")).count();
            require(all.size() == 13 && rolledBack == 6, "read_uncommitted saw " + all + ", expected 13 records, 6 rolled back");
        }
    }

    @SuppressWarnings("unchecked")
    static void listenerInTransaction() throws Exception {
        KafkaTemplate<String, String> template = first.getBean("kafkaTemplate", KafkaTemplate.class);
        for (int i = 0; i < FORWARD; i++) template.send(fwdIn, "f" + i, "in-" + i).get(WAIT_MS, TimeUnit.MILLISECONDS);
        List<String> want = new ArrayList<>();
        for (int i = 0; i < FORWARD; i++) want.add("fwd-in-" + i);
        Map<String, Object> p = consumerProps("read_committed");
        try (Consumer<String, String> c = new DefaultKafkaConsumerFactory<String, String>(p).createConsumer()) {
            TopicPartition tp = new TopicPartition(fwdOut, 0);
            c.assign(Collections.singletonList(tp));
            c.seekToBeginning(Collections.singletonList(tp));
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (got.size() < FORWARD && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
            require(got.equals(want), "read_committed saw the forwarded " + got + ", expected " + want);
        }
        // The container committed the consumed offsets inside its transactions.
        awaitCommitted(fwdGroup, Collections.singletonMap(new TopicPartition(fwdIn, 0), (long) FORWARD));
    }

    static void commitAndResume() throws Exception {
        // The first context closed: its listener's container committed what it delivered.
        awaitCommitted(group, endOffsets(topic, 2));
        // Produced while no member runs: a second listener must start at the commit, neither
        // from the beginning (duplicates) nor from the end (would miss these).
        Map<String, Object> p = producerProps();
        KafkaTemplate<String, String> template = new KafkaTemplate<>(new DefaultKafkaProducerFactory<>(p));
        for (int i = 0; i < SECOND; i++) template.send(topic, "k" + i, "second-" + i).get(WAIT_MS, TimeUnit.MILLISECONDS);
        ((DefaultKafkaProducerFactory<?, ?>) template.getProducerFactory()).destroy();
        groupReceived = new LinkedBlockingQueue<>();
        try (AnnotationConfigApplicationContext second = new AnnotationConfigApplicationContext(Base.class, GroupListener.class)) {
            List<ConsumerRecord<String, String>> got = take(groupReceived, SECOND, WAIT_MS);
            got.addAll(take(groupReceived, 1, 1000));
            List<String> want = new ArrayList<>();
            for (int i = 0; i < SECOND; i++) want.add("second-" + i);
            List<String> seen = values(got);
            Collections.sort(seen, Comparator.comparingInt(v -> Integer.parseInt(v.substring(v.indexOf('-') + 1))));
            require(seen.equals(want), "the second context's listener received " + values(got) + ", expected exactly " + want);
        }
        awaitCommitted(group, endOffsets(topic, 2));
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        long deadlineSeconds = Long.parseLong(args[2]);
        topic = prefix + "-main";
        group = prefix + "-g";
        txnTopic = prefix + "-txn";
        txnGroup = prefix + "-txn-g";
        fwdIn = prefix + "-fwd-in";
        fwdOut = prefix + "-fwd-out";
        fwdGroup = prefix + "-fwd-g";
        System.setProperty("compat.topic", topic);
        System.setProperty("compat.group", group);
        System.setProperty("compat.txn", txnTopic);
        System.setProperty("compat.txngroup", txnGroup);
        System.setProperty("compat.fwd.in", fwdIn);
        System.setProperty("compat.fwd.group", fwdGroup);
        System.err.println("INFO spring-kafka from " + KafkaTemplate.class.getProtectionDomain().getCodeSource().getLocation()
            + ", kafka-clients from " + ConsumerRecord.class.getProtectionDomain().getCodeSource().getLocation());
        startWatchdog(CHECKS, deadlineSeconds);

        run("spring_admin_create_topic", () -> {
            first = new AnnotationConfigApplicationContext(Base.class, GroupListener.class, TxnReader.class, Forwarder.class);
            adminCreatedTopics();
        });
        run("spring_template_send", SpringCompat::templateSend, "spring_admin_create_topic");
        run("spring_listener_receive", SpringCompat::listenerReceive, "spring_template_send");
        run("spring_transactions", SpringCompat::transactions, "spring_admin_create_topic");
        run("spring_listener_in_transaction", SpringCompat::listenerInTransaction, "spring_admin_create_topic");
        running = "closing the first context";
        if (first != null) first.close();
        run("spring_listener_commit_resume", SpringCompat::commitAndResume, "spring_listener_receive");
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(0); // no client thread may keep the JVM alive
    }
}
