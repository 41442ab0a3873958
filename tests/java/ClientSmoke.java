// The Java Kafka client against Sluice with its default settings (idempotent producer,
// acks=all): admin, produce with keys/headers/compression, consume by assign(), offsets, log
// dirs and deleting records.
// Usage: java -cp lib/*:. ClientSmoke BOOTSTRAP TOPIC COUNT [CLIENT.PROPERTIES]; prints "OK <n>"
// or fails. The optional properties file adds client settings (security.protocol, sasl.*, ssl.*).

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class ClientSmoke {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        if (args.length > 3) {
            try (var in = new java.io.FileInputStream(args[3])) {
                common.load(in);
            }
        }

        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            check(admin.listTopics().names().get().contains(topic), "topic listed");
            check(admin.describeCluster().nodes().get().size() == 1, "one node");
        }

        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("compression.type", "lz4");
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (Producer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, "key-" + i, "value-" + i);
                r.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                sent.add(producer.send(r));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) f.get();
        }

        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
        Set<Integer> seen = new HashSet<>();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            long deadline = System.currentTimeMillis() + 60_000;
            Map<Integer, Long> lastOffset = new HashMap<>();
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    int seq = Integer.parseInt(new String(r.headers().lastHeader("seq").value(), StandardCharsets.UTF_8));
                    check(r.key().equals("key-" + seq) && r.value().equals("value-" + seq), "record " + seq + " intact");
                    check(seen.add(seq), "record " + seq + " once");
                    check(r.offset() > lastOffset.getOrDefault(r.partition(), -1L), "offsets increase");
                    lastOffset.put(r.partition(), r.offset());
                }
            }
            check(seen.size() == count, "all " + count + " records, got " + seen.size());
            Map<TopicPartition, Long> ends = consumer.endOffsets(parts);
            check(ends.values().stream().mapToLong(Long::longValue).sum() == count, "end offsets add up");
            Map<TopicPartition, OffsetAndTimestamp> atZero = consumer.offsetsForTimes(Map.of(parts.get(0), 0L));
            check(atZero.get(parts.get(0)) == null || atZero.get(parts.get(0)).offset() == 0, "offsetsForTimes(0)");
        }

        // The admin calls operators' tools make: log dirs (kafka-log-dirs.sh) and deleting
        // records (kafka-delete-records.sh).
        try (Admin admin = Admin.create(common)) {
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(1)).allDescriptions().get();
            LogDirDescription dir = dirs.get(1).values().iterator().next();
            long size = dir.replicaInfos().entrySet().stream().filter(e -> e.getKey().topic().equals(topic))
                .mapToLong(e -> e.getValue().size()).sum();
            check(size > count * 10L, "log dirs report the topic's size: " + size);
            check(dir.totalBytes().orElse(0L) > 0 && dir.usableBytes().orElse(0L) > 0, "log dir disk space");
            Map<TopicPartition, DeletedRecords> deleted = new HashMap<>();
            admin.deleteRecords(Map.of(parts.get(0), RecordsToDelete.beforeOffset(5))).lowWatermarks()
                .forEach((tp, f) -> { try { deleted.put(tp, f.get()); } catch (Exception e) { throw new RuntimeException(e); } });
            check(deleted.get(parts.get(0)).lowWatermark() == 5, "delete records: low watermark 5");
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> earliest =
                admin.listOffsets(Map.of(parts.get(0), OffsetSpec.earliest())).all().get();
            check(earliest.get(parts.get(0)).offset() == 5, "earliest offset 5 after deleting records");
        }
        System.out.println("OK " + seen.size());
    }
}
