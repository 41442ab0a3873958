// The Java Admin client's view of the metadata quorum (DescribeQuorum, KIP-595), as
// kafka-metadata-quorum.sh shows it.
// Usage: java -cp lib/*:. QuorumSmoke BOOTSTRAP
// Prints one line: "leader=<id> epoch=<epoch> hw=<high watermark> voters=<id>:<log end>,..."
// (voters sorted by id) or fails.

import java.util.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;

public class QuorumSmoke {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(p)) {
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            String voters = q.voters().stream()
                .sorted(Comparator.comparingInt(QuorumInfo.ReplicaState::replicaId))
                .map(v -> v.replicaId() + ":" + v.logEndOffset())
                .collect(Collectors.joining(","));
            System.out.println("leader=" + q.leaderId() + " epoch=" + q.leaderEpoch()
                + " hw=" + q.highWatermark() + " voters=" + voters);
        }
    }
}
