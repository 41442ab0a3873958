// A producer or a group consumer with an old Java client (kafka-clients 2.8.2, from
// tests/compat/java/lib-2.8.2), run by test_old_clients.py as a single-file program
// (`java -cp 'lib-2.8.2/*' OldJavaClient.java ...`). One JSON line per delivery report or record
// goes to OUT, as old_client.py writes them.
//
//   OldJavaClient.java produce BOOTSTRAP TOPIC OUT COUNT RATE
//   OldJavaClient.java consume BOOTSTRAP TOPIC OUT GROUP SECONDS
//
// A producer says "first record acknowledged" on stderr once one is.

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class OldJavaClient {
    static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        try (PrintWriter out = new PrintWriter(args[3], StandardCharsets.UTF_8)) {
            if (mode.equals("produce")) {
                produce(out, bootstrap, topic, Integer.parseInt(args[4]), Double.parseDouble(args[5]));
            } else {
                consume(out, bootstrap, topic, args[4], Double.parseDouble(args[5]));
            }
        }
    }

    static void produce(PrintWriter out, String bootstrap, String topic, int count, double rate) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true"); // not the default before 3.0
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", "5000");
        p.put("delivery.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "1000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        long start = System.nanoTime();
        AtomicBoolean acked = new AtomicBoolean();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                long wait = start + (long) (i * 1e9 / rate) - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                String v = "jv-" + i;
                producer.send(new ProducerRecord<>(topic, v, v), (md, e) -> {
                    if (e == null && !acked.getAndSet(true)) {
                        System.err.println("first record acknowledged");
                    }
                    synchronized (out) {
                        if (e == null) {
                            out.println("{\"v\": " + quote(v) + ", \"err\": null, \"p\": " + md.partition() + ", \"o\": " + md.offset() + "}");
                        } else {
                            out.println("{\"v\": " + quote(v) + ", \"err\": " + quote(e.toString()) + "}");
                        }
                    }
                });
            }
            producer.flush();
        }
    }

    static void consume(PrintWriter out, String bootstrap, String topic, String group, double seconds) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("auto.offset.reset", "earliest");
        p.put("auto.commit.interval.ms", "500");
        p.put("session.timeout.ms", "10000");
        p.put("reconnect.backoff.max.ms", "1000");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        long end = System.nanoTime() + (long) (seconds * 1e9);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(Collections.singletonList(topic));
            while (System.nanoTime() < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    out.println("{\"v\": " + quote(r.value()) + ", \"p\": " + r.partition() + ", \"o\": " + r.offset() + "}");
                }
            }
        }
    }
}
