// The Java consumer reading from a follower (KIP-392): with client.rack set to a follower's rack,
// the leader sends it to that follower, and it reads topic partition 0 from the start, with the
// incremental fetch sessions the Java client uses (KIP-227).
// Usage: java -cp lib/*:. FollowerReadSmoke BOOTSTRAP TOPIC RACK COUNT
// Expects the values "v0" .. "v<COUNT-1>" in order; prints "OK <n>" or fails.

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class FollowerReadSmoke {
    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1], rack = args[2];
        int count = Integer.parseInt(args[3]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("client.rack", rack);
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                }
            }
        }
        if (got.size() != count) throw new AssertionError("read " + got.size() + " of " + count);
        for (int i = 0; i < count; i++) {
            if (!got.get(i).equals("v" + i)) throw new AssertionError("record " + i + " is " + got.get(i));
        }
        System.out.println("OK " + got.size());
    }
}
