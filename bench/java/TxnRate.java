import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactions per second of one Java transactional producer (the Apache Kafka client; it
 * uses transactions version 2 where the broker offers it): begin, send `perTxn` records of
 * 100 bytes, commit, for `seconds`. Prints "TXN_PER_S <rate>".
 *
 *   java -cp 'tests/java/lib/*:bench/java' TxnRate BOOTSTRAP TOPIC SECONDS PER_TXN ID
 */
public class TxnRate {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        double seconds = Double.parseDouble(args[2]);
        int perTxn = Integer.parseInt(args[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", args[4]);
        p.put("linger.ms", "0");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[100];
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int i = 0; i < 50; i++) { // warm-up: connections, metadata, JIT
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, value));
                producer.commitTransaction();
            }
            long start = System.nanoTime();
            long deadline = start + (long) (seconds * 1e9);
            long done = 0;
            while (System.nanoTime() < deadline) {
                producer.beginTransaction();
                for (int i = 0; i < perTxn; i++) {
                    producer.send(new ProducerRecord<>(topic, value));
                }
                producer.commitTransaction();
                done++;
            }
            double elapsed = (System.nanoTime() - start) / 1e9;
            System.out.printf("TXN_PER_S %.1f%n", done / elapsed);
        }
    }
}
