// Transactions through the Java client (kafka-clients), which speaks KIP-890's transaction
// protocol (transaction.version 2) when the broker offers it: consume-transform-produce with
// sendOffsetsToTransaction, an aborted transaction, read_committed vs read_uncommitted, the
// epoch bumped by every commit and abort (TV2), and a second producer fencing the first.
// Usage: java -cp lib/*:. TxnSmoke BOOTSTRAP [REPLICATION_FACTOR]; prints "OK" or fails.

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class TxnSmoke {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String id) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", id);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static List<String> readAll(String bootstrap, String topic, String isolation, int expected) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "reader-" + isolation + "-" + topic);
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", isolation);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long end = System.currentTimeMillis() + 20000;
            while (System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) out.add(r.value());
                if (out.size() >= expected && System.currentTimeMillis() > end - 17000) break;
            }
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        short rf = args.length > 1 ? Short.parseShort(args[1]) : 1;
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic("jtx-in", 2, rf), new NewTopic("jtx-out", 2, rf))).all().get();
        }
        // Input: 50 plain records.
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < 50; i++) p.send(new ProducerRecord<>("jtx-in", "k" + i, "in-" + i));
        }

        // Consume-transform-produce, 10 inputs per transaction; the 3rd transaction aborts.
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("group.id", "jtx-processor");
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("isolation.level", "read_committed");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        int committed = 0, aborted = 0, txns = 0;
        try (KafkaProducer<String, String> p = producer(bootstrap, "jtx-1");
             KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            p.initTransactions();
            consumer.subscribe(List.of("jtx-in"));
            int seen = 0;
            long end = System.currentTimeMillis() + 60000;
            while (seen < 50 && System.currentTimeMillis() < end) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(300));
                if (batch.isEmpty()) continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                int n = 0;
                for (ConsumerRecord<String, String> r : batch) {
                    p.send(new ProducerRecord<>("jtx-out", r.key(), r.value().replace("in-", "out-")));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    n++;
                }
                p.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                txns++;
                if (txns == 2) {
                    // abortTransaction drops batches not sent yet: send them, so that the
                    // aborted records are in the log for read_uncommitted below.
                    p.flush();
                    p.abortTransaction();
                    aborted += n;
                    // Rewind to the last committed positions to process them again.
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata c = consumer.committed(Set.of(tp)).get(tp);
                        consumer.seek(tp, c == null ? 0 : c.offset());
                    }
                } else {
                    p.commitTransaction();
                    committed += n;
                    seen += n;
                }
            }
            check(seen == 50, "processed 50 inputs, got " + seen);
        }
        try (Admin admin = Admin.create(common)) {
            TransactionDescription d = admin.describeTransactions(List.of("jtx-1")).description("jtx-1").get();
            // TV2 bumps the epoch at every commit and abort; TV1 would leave it at 0.
            check(d.producerEpoch() >= txns, "epoch bumped per transaction (TV2): epoch " + d.producerEpoch() + " after " + txns);
            check(d.state() == TransactionState.COMPLETE_COMMIT, "state " + d.state());
            Map<TopicPartition, OffsetAndMetadata> groupOffsets =
                admin.listConsumerGroupOffsets("jtx-processor").partitionsToOffsetAndMetadata().get();
            long total = groupOffsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(total == 50, "committed input offsets sum to 50, got " + total);
        }
        List<String> rc = readAll(bootstrap, "jtx-out", "read_committed", 50);
        check(rc.size() == 50 && new HashSet<>(rc).size() == 50, "read_committed: 50 distinct outputs, got " + rc.size());
        List<String> ru = readAll(bootstrap, "jtx-out", "read_uncommitted", 50 + aborted);
        check(ru.size() == 50 + aborted, "read_uncommitted also sees the " + aborted + " aborted, got " + ru.size());

        // A second producer with the same id fences the first.
        KafkaProducer<String, String> first = producer(bootstrap, "jtx-fence");
        first.initTransactions();
        first.beginTransaction();
        first.send(new ProducerRecord<>("jtx-out", "z", "zombie")).get();
        KafkaProducer<String, String> second = producer(bootstrap, "jtx-fence");
        second.initTransactions();
        boolean fenced = false;
        try {
            first.commitTransaction();
        } catch (ProducerFencedException e) {
            fenced = true;
        } catch (org.apache.kafka.common.KafkaException e) {
            fenced = e.getCause() instanceof ProducerFencedException || e instanceof org.apache.kafka.common.errors.InvalidProducerEpochException;
        }
        check(fenced, "the first producer is fenced");
        first.close(Duration.ZERO);
        second.beginTransaction();
        second.send(new ProducerRecord<>("jtx-out", "ok", "after-fence")).get();
        second.commitTransaction();
        second.close();
        List<String> after = readAll(bootstrap, "jtx-out", "read_committed", 51);
        check(after.contains("after-fence") && !after.contains("zombie"), "zombie aborted, new producer committed");
        System.out.println("OK");
    }
}
