// Pipelined transactional writes (Java client 4.3.1, transactions version 2): small batches
// and no linger, so several batches of a new transaction reach a partition's leader before
// the first is verified with the coordinator. Each must be appended in order; one appended
// ahead of an earlier one fails its sequence check and the client aborts the transaction
// (OutOfOrderSequenceException). Then read_committed sees every committed record, once.
// Usage: java -cp lib/*:. TxnPipelineSmoke BOOTSTRAP TOPIC PARTITIONS; prints "OK" or fails.

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxnPipelineSmoke {
    static final int TXNS = 10, PER_TXN = 200;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String pad = "-".repeat(300);
        for (int q = 0; q < partitions; q++) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("transactional.id", "pipeline-" + q);
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            p.put("batch.size", "1024");
            p.put("linger.ms", "0");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                producer.initTransactions();
                for (int t = 0; t < TXNS; t++) {
                    producer.beginTransaction();
                    for (int i = 0; i < PER_TXN; i++)
                        producer.send(new ProducerRecord<>(topic, q, "k", q + "-" + t + "-" + i + pad));
                    producer.commitTransaction(); // throws (and the test fails) if a batch failed
                }
            }
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "pipeline-reader");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        int expected = partitions * TXNS * PER_TXN;
        Set<String> seen = new HashSet<>();
        int total = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long end = System.currentTimeMillis() + 60000;
            while (total < expected && System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                    seen.add(r.value());
                    total++;
                }
            }
        }
        if (total != expected || seen.size() != expected)
            throw new AssertionError("read_committed: " + total + " records, " + seen.size() + " distinct, expected " + expected);
        System.out.println("OK");
    }
}
