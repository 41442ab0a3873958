// Partition reassignments through the Java Admin client (KIP-455), the calls
// kafka-reassign-partitions.sh makes.
// Usage: java -cp lib/*:. ReassignSmoke BOOTSTRAP move TOPIC PARTITION REPLICAS  (e.g. 3,2)
//        java -cp lib/*:. ReassignSmoke BOOTSTRAP cancel TOPIC PARTITION
//        java -cp lib/*:. ReassignSmoke BOOTSTRAP list
// move/cancel print "ok" or "error <exception class>: <message>"; list prints one line per
// running reassignment: "TOPIC-PARTITION replicas=a,b adding=c removing=d".

import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;

public class ReassignSmoke {
    static String ids(List<Integer> v) {
        return v.stream().map(String::valueOf).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(p)) {
            String what = args[1];
            if (what.equals("list")) {
                Map<TopicPartition, PartitionReassignment> running =
                    admin.listPartitionReassignments().reassignments().get();
                List<String> lines = new ArrayList<>();
                for (Map.Entry<TopicPartition, PartitionReassignment> e : running.entrySet()) {
                    PartitionReassignment r = e.getValue();
                    lines.add(e.getKey() + " replicas=" + ids(r.replicas())
                        + " adding=" + ids(r.addingReplicas())
                        + " removing=" + ids(r.removingReplicas()));
                }
                Collections.sort(lines);
                lines.forEach(System.out::println);
                return;
            }
            TopicPartition tp = new TopicPartition(args[2], Integer.parseInt(args[3]));
            Optional<NewPartitionReassignment> target = Optional.empty();
            if (what.equals("move")) {
                List<Integer> replicas = Arrays.stream(args[4].split(","))
                    .map(Integer::valueOf).collect(Collectors.toList());
                target = Optional.of(new NewPartitionReassignment(replicas));
            }
            try {
                admin.alterPartitionReassignments(Map.of(tp, target)).all().get();
                System.out.println("ok");
            } catch (ExecutionException e) {
                System.out.println("error " + e.getCause().getClass().getSimpleName() + ": "
                    + e.getCause().getMessage());
            }
        }
    }
}
