"""A long randomized fault run on a local cluster (scripts/cluster-soak; not in CI).

Two idempotent acks=all producers and a consumer group (one read_uncommitted member, one
read_committed) work on a replicated topic while faults hit the cluster one at a time: a leader
or a minority SIGKILLed, SIGSTOPped or SIGTERMed for a few seconds, a follower's disk wiped,
every node killed at once, a node's wall clock stepped an hour either way (libfaketime), and
with --netns a link between two nodes cut or a node cut off from the others (network
namespaces, root only). After each fault the cluster must heal (every node back, every
partition led and in sync) within --heal-s. At the end the topic is drained at both isolation
levels and the whole history checked (checker.py).

    scripts/cluster-soak [--seconds 600] [--nodes 3|5] [--seed N] [--rate 500] [--partitions 6] [--netns]

The seed (printed first) fixes the fault schedule; timing still differs between runs, so a seed
replays the same faults, not the same interleaving. A failing run saves its history as
tests/artifacts/history-soak-<seed>.json beside the node logs.
"""

import argparse
import contextlib
import random
import sys
import time

from .checker import OK, READ_COMMITTED, READ_UNCOMMITTED, History, Read
from .harness import cluster_cli_missing, scratch_cluster
from .netns import Network, unavailable
from .test_clock import HOUR, faketime_env, libfaketime_path, set_offset
from .workload import ConsumerWorkload, ProducerWorkload, drain_and_check

PROG = "scripts/cluster-soak"
TOPIC = "soak"
GROUP = "soak"


class Soak:
    def __init__(self, cluster, rng, args, network=None, clocks=None):
        self.c, self.rng, self.args = cluster, rng, args
        self.network, self.clocks = network, clocks or {}
        self.minority = (len(cluster.ids) - 1) // 2
        self.history = History()
        self.producers, self.consumers = [], []
        self.findings = []
        self.started = time.monotonic()

    def log(self, message):
        print(f"[{time.monotonic() - self.started:7.1f}s] {message}", flush=True)

    def leader(self):
        return self.c.wait_for_leader(TOPIC, self.rng.randrange(self.args.partitions), timeout=self.args.heal_s)

    def some(self):
        return self.rng.sample(self.c.ids, self.rng.randint(1, self.minority))

    # Each fault applies itself and returns (what it did, how to undo it).
    def kill_leader(self):
        i = self.leader()
        self.c.kill(i)
        return f"SIGKILL leader {i}", lambda: self.c.restart(i)

    def kill_minority(self):
        ids = self.some()
        for i in ids:
            self.c.kill(i)
        return f"SIGKILL {ids}", lambda: [self.c.restart(i) for i in ids]

    def pause_leader(self):
        i = self.leader()
        self.c.pause(i)
        return f"SIGSTOP leader {i}", lambda: self.c.resume(i)

    def pause_minority(self):
        ids = self.some()
        for i in ids:
            self.c.pause(i)
        return f"SIGSTOP {ids}", lambda: [self.c.resume(i) for i in ids]

    def terminate(self):
        i = self.rng.choice(self.c.ids)
        code = self.c.stop(i)
        if code != 0:
            self.findings.append(f"node {i} exited with {code} after SIGTERM")
        return f"SIGTERM {i} (exit {code})", lambda: self.c.restart(i)

    def wipe_follower(self):
        leader = self.leader()
        i = self.rng.choice([j for j in self.c.ids if j != leader])
        self.c.wipe(i, timeout=self.args.heal_s, leave_isr_of=TOPIC)  # see test_failover's wipe test
        return f"wiped follower {i}", lambda: None

    def kill_all(self):
        self.c.kill_all()
        return "SIGKILL all", self.c.start

    def clock_jump(self):
        i = self.rng.choice(self.c.ids)
        seconds = self.rng.choice((-HOUR, HOUR))
        set_offset(self.clocks[i], seconds)
        return f"node {i}'s clock {seconds:+d} s", lambda: set_offset(self.clocks[i], 0)

    def cut_link(self):
        a, b = self.rng.sample(self.c.ids, 2)
        self.network.cut(a, b)
        return f"cut link {a}-{b}", self.network.heal_all

    def isolate(self):
        i = self.rng.choice(self.c.ids)
        self.network.isolate(i)
        return f"cut node {i} off", self.network.heal_all

    FAULTS = {kill_leader: 3, kill_minority: 2, pause_leader: 2, pause_minority: 1, terminate: 2,
              wipe_follower: 1, kill_all: 1, clock_jump: 1}
    NETWORK_FAULTS = {cut_link: 2, isolate: 2}

    def start_workloads(self):
        run_s = self.args.seconds + 3 * self.args.heal_s
        for name in ("p1", "p2"):
            self.start_producer(name, run_s)
        for name, isolation in (("c1", READ_UNCOMMITTED), ("c2", READ_COMMITTED)):
            self.consumers.append(ConsumerWorkload(self.c.bootstrap, TOPIC, GROUP, self.history, name=name,
                                                   isolation=isolation, duration_s=run_s).start())

    def start_producer(self, name, run_s):
        rate = self.args.rate / 2
        self.producers.append(ProducerWorkload(self.c.bootstrap, TOPIC, self.history, name=name, rate_per_s=rate,
                                               max_count=int(rate * run_s), duration_s=run_s).start())

    def replace_failed_producers(self):
        for w in list(self.producers):
            if w.fatal is not None:
                self.findings.append(f"producer {w.name} failed: {w.fatal}")
                self.log(self.findings[-1])
                self.producers.remove(w)
                self.start_producer(f"{w.name}'", self.args.seconds)

    def let_consumers_catch_up(self):
        """Gives the group up to --heal-s to poll every acknowledged write, so that the poll checks
        cover the tail too; a group that stays behind is not an anomaly, only less checked."""
        deadline = time.monotonic() + self.args.heal_s
        while time.monotonic() < deadline:
            with self.history.lock:
                polled = {e.value for e in self.history.consumer_events if isinstance(e, Read)}
                behind = sum(1 for s in self.history.sends if s.status == OK and s.value not in polled)
            if not behind:
                return
            time.sleep(0.5)
        self.log(f"the consumer group is still {behind} records behind")

    def heal(self):
        deadline = time.monotonic() + self.args.heal_s
        for i in self.c.ids:
            node = self.c.node(i)
            if node.paused:
                self.c.resume(i)
            elif not node.alive():
                self.c.restart(i, timeout=self.args.heal_s)
        self.c.wait_in_sync(TOPIC, max(deadline - time.monotonic(), 1))

    def run(self):
        self.c.start()
        self.c.create_topic(TOPIC, self.args.partitions, replication_factor=self.args.replication_factor)
        self.start_workloads()
        menu = {**self.FAULTS, **(self.NETWORK_FAULTS if self.network else {})}
        if not self.clocks:
            menu.pop(Soak.clock_jump)
        faults, weights = list(menu), list(menu.values())
        end = self.started + self.args.seconds
        while time.monotonic() < end and not self.findings:
            # Calm, then the fault for a random while: the schedule itself, not waits for state.
            time.sleep(self.rng.uniform(2, 6))
            fault = self.rng.choices(faults, weights)[0]
            what = fault.__name__
            try:
                what, undo = fault(self)
                self.log(f"{what}; acked so far {self.history.acked_count()}")
                time.sleep(self.rng.uniform(1, 8))
                undo()
                self.heal()
            except AssertionError as e:
                self.findings.append(f"did not heal within {self.args.heal_s}s after {what}: {e}")
                self.log(self.findings[-1])
            self.replace_failed_producers()
        self.log("stopping the workload")
        for w in self.producers:
            w.finish()
        self.let_consumers_catch_up()
        for w in self.consumers:
            w.finish()
        self.heal()
        result = drain_and_check(self.c, TOPIC, self.history, f"soak-{self.args.seed}",
                                 isolations=(READ_UNCOMMITTED, READ_COMMITTED))
        print(result)
        for f in self.findings:
            print("finding:", f)
        return result.valid and not self.findings


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600, help="how long faults are injected")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rate", type=float, default=500, help="records/s over both producers")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--heal-s", type=float, default=60, help="how long a fault may take to heal")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--netns", action="store_true",
                    help="run each node in a network namespace and cut links too (root)")
    args = ap.parse_args(argv)
    why = cluster_cli_missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    if args.seed is None:
        args.seed = random.randrange(1 << 32)
    if args.netns and unavailable():
        print(f"--netns: {unavailable()}", file=sys.stderr)
        return 2
    print(f"seed {args.seed}: {args.nodes} nodes, {args.seconds:.0f}s, {args.rate:.0f} records/s"
          f"{', network namespaces' if args.netns else ''}", flush=True)
    with contextlib.ExitStack() as stack:
        network = None
        if args.netns:
            network = Network(list(range(1, args.nodes + 1)))
            stack.callback(network.close)
        c = stack.enter_context(scratch_cluster(args.nodes, "sluice-soak-", args.keep, network=network))
        clocks = {}
        lib = libfaketime_path()
        if lib is None:
            print("libfaketime is missing (scripts/python-env installs it): no clock jumps", flush=True)
        else:
            for i in c.ids:
                clocks[i] = str(c.node(i).data_dir.parent / f"clock-{i}")
                set_offset(clocks[i], 0)
                c.node(i).env.update(faketime_env(lib, clocks[i]))
        return 0 if Soak(c, random.Random(args.seed), args, network, clocks).run() else 1


if __name__ == "__main__":
    sys.exit(main())
