// An idempotent Java producer whose state the broker expired (producer.id.expiration.ms is
// measured on the records' own timestamps, so records stamped more than a day ago expire the
// producer at every sweep) goes on producing: the broker takes its next sequence, as Kafka does
// since KIP-360, instead of answering UNKNOWN_PRODUCER_ID, which this client retries without
// end (the error carries no log start offset) until its delivery timeout.
// Usage: java -cp lib/*:. ExpiredProducerSmoke BOOTSTRAP TOPIC ROUNDS SWEEP_WAIT_MS; prints
// "OK <n>" or fails.

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class ExpiredProducerSmoke {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int rounds = Integer.parseInt(args[2]);
        long sweepWaitMs = Long.parseLong(args[3]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("enable.idempotence", "true");
        pp.put("acks", "all");
        pp.put("request.timeout.ms", "5000");
        pp.put("delivery.timeout.ms", "15000");
        long dayAndAnHourAgo = System.currentTimeMillis() - 25L * 3600 * 1000;
        int sent = 0;
        try (Producer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int round = 0; round < rounds; round++) {
                for (int i = 0; i < 3; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, dayAndAnHourAgo + sent, "k", "v" + sent)).get();
                    sent++;
                }
                // The broker's sweep forgets the producer meanwhile.
                Thread.sleep(sweepWaitMs);
            }
            producer.send(new ProducerRecord<>(topic, 0, "k", "v" + sent)).get();
            sent++;
        }
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> values = new ArrayList<>();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 30_000;
            while (values.size() < sent && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) values.add(r.value());
            }
            check(consumer.endOffsets(List.of(tp)).get(tp) == sent, "end offset " + sent);
        }
        for (int i = 0; i < sent; i++) check(values.get(i).equals("v" + i), "record " + i + " in order, once: " + values);
        System.out.println("OK " + sent);
    }
}
