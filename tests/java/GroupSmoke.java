// The Java consumer with the new group protocol (KIP-848, group.protocol=consumer) against
// Sluice: two members of one group share a topic's partitions (assigned by the broker), read
// every record once between them, commit with their member epoch, and a third member joining
// takes partitions over without losing or repeating committed work; the Admin describes the
// group (ConsumerGroupDescribe) while it runs.
// Usage: java -cp lib/*:. GroupSmoke BOOTSTRAP; prints "OK <n>" or fails.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class GroupSmoke {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static KafkaConsumer<String, String> member(String bootstrap) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "java-848");
        c.put("group.protocol", "consumer");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = "java-848";
        int count = 4000;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get();
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(topic, "k" + i, Integer.toString(i)));
            p.flush();
        }
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<String> duplicates = Collections.synchronizedList(new ArrayList<>());
        Map<String, Set<Integer>> assigned = new ConcurrentHashMap<>();
        ExecutorService pool = Executors.newFixedThreadPool(3, r -> {
            Thread t = new Thread(r);
            t.setDaemon(true); // a failed check in main must not leave the JVM running
            return t;
        });
        List<Future<?>> running = new ArrayList<>();
        CountDownLatch third = new CountDownLatch(1);
        CountDownLatch described = new CountDownLatch(1);
        for (int m = 0; m < 3; m++) {
            final String name = "m" + m;
            final boolean late = m == 2;
            running.add(pool.submit(() -> {
                if (late) {
                    try { third.await(); } catch (InterruptedException e) { return null; }
                }
                try (KafkaConsumer<String, String> c = member(bootstrap)) {
                    c.subscribe(List.of(topic));
                    long deadline = System.currentTimeMillis() + 60_000;
                    while (seen.size() < count && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : records) {
                            if (!seen.add(r.value())) duplicates.add(r.value());
                        }
                        if (!records.isEmpty()) c.commitSync();
                        Set<Integer> mine = new TreeSet<>();
                        for (TopicPartition tp : c.assignment()) mine.add(tp.partition());
                        assigned.put(name, mine);
                        if (seen.size() >= count / 2) third.countDown();
                    }
                    // Stay in the group until the Admin has described it.
                    try { described.await(30, TimeUnit.SECONDS); } catch (InterruptedException e) { return null; }
                }
                return null;
            }));
        }
        // While the members run, the Admin describes the group through ConsumerGroupDescribe.
        String describedAs = "never described";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            long until = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < until) {
                ConsumerGroupDescription d;
                try {
                    d = admin.describeConsumerGroups(List.of("java-848")).all().get().get("java-848");
                } catch (ExecutionException e) {
                    Thread.sleep(50); // the group does not exist until its first member joins
                    continue;
                }
                // Asked before the first member joined, the Admin falls back to DescribeGroups
                // and calls the group Classic (as with Kafka); ask again until it is a consumer
                // group with members.
                if (!d.members().isEmpty() && d.type() == org.apache.kafka.common.GroupType.CONSUMER) {
                    describedAs = d.type() + " with " + d.members().size() + " member(s)";
                    break;
                }
                Thread.sleep(50);
            }
        } finally {
            described.countDown();
        }
        for (Future<?> f : running) f.get(90, TimeUnit.SECONDS);
        pool.shutdown();
        check(seen.size() == count, "all " + count + " records, got " + seen.size());
        check(duplicates.isEmpty(), "no record read twice: " + duplicates.size() + " duplicates");
        try (KafkaConsumer<String, String> c = member(bootstrap)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (int p = 0; p < 4; p++) parts.add(new TopicPartition(topic, p));
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(new HashSet<>(parts));
            Map<TopicPartition, Long> ends = c.endOffsets(parts);
            for (TopicPartition tp : parts) {
                check(committed.get(tp) != null && committed.get(tp).offset() == ends.get(tp),
                      "committed " + committed.get(tp) + " = end " + ends.get(tp) + " for " + tp);
            }
        }
        check(!describedAs.equals("never described"), "the Admin saw the group with members");
        System.out.println("OK " + seen.size() + " assignments " + assigned + "; described as " + describedAs);
    }
}
