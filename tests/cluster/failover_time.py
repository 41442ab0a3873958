"""Failover time of one partition on a local cluster (scripts/cluster-failover-time; not in CI,
where test_failover.py bounds the worst of three kills): SIGKILL its leader N times, restarting
the node and waiting for a full ISR in between, and time each kill until the first acks=all write
produced after it is acknowledged. Every write is recorded and checked at the end.

    scripts/cluster-failover-time [--kills 10] [--nodes 3|5] [--session-timeout-ms MS] [--keep]
"""

import argparse
import sys

from .checker import History
from .harness import cluster_cli_missing, scratch_cluster
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
    args = ap.parse_args(argv)
    why = cluster_cli_missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    env = {} if args.session_timeout_ms is None else \
        {"SLUICE_CLUSTER_SESSION_TIMEOUT_MS": str(args.session_timeout_ms)}
    with scratch_cluster(args.nodes, "sluice-failover-", args.keep, env) as c:
        c.start()
        c.create_topic(TOPIC, 1, replication_factor=3)
        history = History()
        times = []
        for k in range(args.kills):
            times += failover_times(c, TOPIC, history, kills=1)
            print(f"kill {k + 1}/{args.kills}: {times[-1]:.2f} s", flush=True)
        print(summarize(times))
        result = drain_and_check(c, TOPIC, history, "failover-time")
        print(result)
        return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
