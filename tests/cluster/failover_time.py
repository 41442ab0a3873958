"""Failover time of one partition on a local cluster (scripts/cluster-failover-time; not in CI,
where test_failover.py bounds the worst of three kills): SIGKILL its leader N times, restarting
the node and waiting for a full ISR in between, and time each kill until the first acks=all write
produced after it is acknowledged. Every write is recorded and checked at the end.

    scripts/cluster-failover-time [--kills 10] [--nodes 3|5] [--session-timeout-ms MS] [--keep] [--kafka]

With --kafka the same schedule then runs against a 3-node Apache Kafka cluster (KRaft, default
settings, installed from Maven Central), and both summaries and their ratio are printed.
"""

import argparse
import statistics
import sys

from .checker import History
from .harness import cluster_cli_missing, scratch_cluster
from .kafka_cluster import scratch_kafka_cluster
from .workload import drain_and_check, failover_times, summarize

PROG = "scripts/cluster-failover-time"
TOPIC = "failover-time"


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--session-timeout-ms", type=int, default=None,
                    help="the nodes' cluster_session_timeout_ms (default: theirs)")
    ap.add_argument("--kafka", action="store_true",
                    help="then the same against a 3-node Apache Kafka cluster, in the same run")
    args = ap.parse_args(argv)
    why = cluster_cli_missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    env = {} if args.session_timeout_ms is None else \
        {"SLUICE_CLUSTER_SESSION_TIMEOUT_MS": str(args.session_timeout_ms)}
    with scratch_cluster(args.nodes, "sluice-failover-", args.keep, env) as c:
        sluice_times, valid = measure(c, args.kills, "sluice")
    if not args.kafka:
        return 0 if valid else 1
    with scratch_kafka_cluster(3, "kafka-failover-") as c:
        kafka_times, kafka_valid = measure(c, args.kills, "kafka")
    print(f"sluice: {summarize(sluice_times)}")
    print(f"kafka:  {summarize(kafka_times)}")
    print(f"Kafka ÷ Sluice: median {statistics.median(kafka_times) / statistics.median(sluice_times):.1f}, "
          f"worst {max(kafka_times) / max(sluice_times):.1f}")
    return 0 if valid and kafka_valid else 1


def measure(c, kills, label):
    """Starts `c`, creates the topic, kills its leader `kills` times; (times, checker valid)."""
    c.start()
    c.create_topic(TOPIC, 1, replication_factor=3, timeout=60)
    history = History()
    times = []
    for k in range(kills):
        times += failover_times(c, TOPIC, history, kills=1, timeout_s=60)
        print(f"{label} kill {k + 1}/{kills}: {times[-1]:.2f} s", flush=True)
    print(f"{label}: {summarize(times)}")
    result = drain_and_check(c, TOPIC, history, f"failover-time-{label}")
    print(result)
    return times, result.valid


if __name__ == "__main__":
    sys.exit(main())
