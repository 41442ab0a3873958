// The Java Admin client's addRaftVoter / removeRaftVoter (KIP-853), as
// kafka-metadata-quorum.sh add-controller / remove-controller send them.
// Usage: java -cp lib/*:. VoterSmoke BOOTSTRAP add|remove NODE_ID
// Prints "ok", or "error <ExceptionClass>: <message>" (exit code 0 either way); fails on
// anything else.

import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.Uuid;

public class VoterSmoke {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        int node = Integer.parseInt(args[2]);
        try (Admin admin = Admin.create(p)) {
            try {
                if (args[1].equals("add")) {
                    // The endpoint is what add-controller reads from the new controller's
                    // config; Sluice uses the address the node joined the metadata group with.
                    Set<RaftVoterEndpoint> endpoints =
                        Set.of(new RaftVoterEndpoint("CONTROLLER", "localhost", 9093));
                    admin.addRaftVoter(node, Uuid.randomUuid(), endpoints).all().get();
                } else {
                    admin.removeRaftVoter(node, Uuid.randomUuid()).all().get();
                }
                System.out.println("ok");
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                System.out.println("error " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
            }
        }
    }
}
