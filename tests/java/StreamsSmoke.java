// Kafka Streams (the Java library, unchanged) against Sluice: a word count with a repartition
// step and a state store, processing.guarantee=exactly_once_v2. It exercises what Streams
// needs of a broker: internal topic creation and validation (DescribeConfigs), a compacted
// changelog, transactions with the consumer group's metadata (TxnOffsetCommit), read_committed
// fetches, and DeleteRecords, which Streams uses to purge its repartition topic.
// Usage: java -cp lib/*:. StreamsSmoke BOOTSTRAP RECORDS STATE_DIR; prints "OK ..." or fails.

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class StreamsSmoke {
    static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int records = Integer.parseInt(args[1]);
        String stateDir = args[2];
        String app = "streams-smoke";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic("words", 3, (short) 1), new NewTopic("counts", 3, (short) 1)))
                .all().get();
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < records; i++) p.send(new ProducerRecord<>("words", "user-" + i, WORDS[i % WORDS.length]));
            p.flush();
        }

        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        sp.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 100);
        sp.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        sp.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream("words", Consumed.with(Serdes.String(), Serdes.String()))
            .selectKey((user, word) -> word)
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .to("counts", Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), sp);
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        streams.setUncaughtExceptionHandler(e -> {
            failures.add(e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();

        Map<String, Long> latest = new HashMap<>();
        long expected = records / WORDS.length;
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", "counts-reader");
        cp.put("auto.offset.reset", "earliest");
        cp.put("isolation.level", "read_committed");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", LongDeserializer.class.getName());
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of("counts"));
            long deadline = System.currentTimeMillis() + 120_000;
            while (System.currentTimeMillis() < deadline && failures.isEmpty()) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) latest.put(r.key(), r.value());
                if (latest.size() == WORDS.length && latest.values().stream().allMatch(v -> v >= expected)) break;
            }
        }
        check(failures.isEmpty(), "streams failed: " + failures);
        for (String w : WORDS) check(Long.valueOf(expected).equals(latest.get(w)), "count of " + w + ": " + latest.get(w) + ", expected " + expected + " (all: " + latest + ")");

        // Streams purges its repartition topic with DeleteRecords once it committed past it.
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get();
            String repartition = names.stream().filter(n -> n.startsWith(app) && n.endsWith("-repartition")).findFirst()
                .orElseThrow(() -> new AssertionError("no repartition topic in " + names));
            String changelog = names.stream().filter(n -> n.startsWith(app) && n.endsWith("-changelog")).findFirst()
                .orElseThrow(() -> new AssertionError("no changelog topic in " + names));
            String policy = admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, changelog))).all().get()
                .values().iterator().next().get(TopicConfig.CLEANUP_POLICY_CONFIG).value();
            check(policy.contains("compact"), "changelog cleanup.policy " + policy);
            long purged = 0;
            long deadline = System.currentTimeMillis() + 30_000;
            while (purged == 0 && System.currentTimeMillis() < deadline) {
                Map<TopicPartition, OffsetSpec> query = new HashMap<>();
                for (int p = 0; p < 3; p++) query.put(new TopicPartition(repartition, p), OffsetSpec.earliest());
                purged = admin.listOffsets(query).all().get().values().stream().mapToLong(i -> i.offset()).sum();
                if (purged == 0) Thread.sleep(200);
            }
            check(purged > 0, "the repartition topic " + repartition + " was never purged");
            System.out.println("OK counts=" + latest + " repartition_purged_to=" + purged + " changelog=" + changelog);
        } finally {
            streams.close(Duration.ofSeconds(10));
        }
    }
}
