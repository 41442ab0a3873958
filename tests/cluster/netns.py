"""Nodes in network namespaces of their own, so that links between them can be cut while
clients still reach every node.

    root namespace: bridge slb<k> 10.213.<k>.100/24  (the tests and their clients live here)
        ├── veth ──▶ netns sl<k>-1: 10.213.<k>.1   node 1
        ├── veth ──▶ netns sl<k>-2: 10.213.<k>.2   node 2
        └── veth ──▶ netns sl<k>-3: 10.213.<k>.3   node 3

Cutting the link between nodes a and b adds a blackhole route to b's address in a's namespace
and to a's in b's: neither can send to the other (nor answer it), while both still talk to the
clients on the bridge and to the other nodes. Only namespaces, interfaces and routes this module
made are touched; everything but one guard route (below) is removed at the end. Needs root
(`ip netns`)."""

import itertools
import os
import subprocess

from conftest import worker_slice

_counter = itertools.count(1)
_guarded = False

# Every network lives in 10.213.0.0/16, and that range is blackholed in the root namespace (a
# bridge's own /24 is more specific and wins while it exists): a client left over from a test
# that still dials a node after its network is gone gets no route, instead of the packets
# leaving the machine by the default route. The route stays after the tests (clients are
# destroyed at interpreter exit, after atexit handlers would have removed it); remove it with
# `ip route del blackhole 10.213.0.0/16`.
GUARD = "10.213.0.0/16"


def _guard():
    global _guarded
    if not _guarded:
        _ip("route", "replace", "blackhole", GUARD)
        _guarded = True


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def unavailable():
    """Why network namespaces cannot be used here, or None."""
    probe = f"slprobe{os.getpid() % 100000}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Network:
    def __init__(self, nodes):
        # One subnet and name set per network: k from this test process's slice of 20..219
        # (conftest.worker_slice keeps pytest-xdist workers apart), the next k when a bridge of
        # that name exists (left over from a killed run).
        low, high = worker_slice(20, 220)
        self.nodes = list(nodes)
        self.cut_links = set()
        self._made = []
        for _ in range(high - low):
            self.k = low + (os.getpid() * 7 + next(_counter)) % (high - low)
            self.bridge = f"slb{self.k}"
            if _ip("link", "show", self.bridge, check=False).returncode != 0:
                break
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def address(self, node):
        return f"10.213.{self.k}.{node}"

    def namespace(self, node):
        return f"sl{self.k}-{node}"

    def exec_prefix(self, node):
        return ["ip", "netns", "exec", self.namespace(node)]

    def _build(self):
        _guard()
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        _ip("addr", "add", f"10.213.{self.k}.100/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for n in self.nodes:
            ns, host_end, ns_end = self.namespace(n), f"slh{self.k}x{n}", f"sln{self.k}x{n}"
            _ip("netns", "add", ns)
            self._made.append(("netns", ns))
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            self._made.append(("link", host_end))
            _ip("link", "set", ns_end, "netns", ns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(n)}/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def cut(self, a, b):
        """No packet between nodes a and b, either way."""
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.namespace(x), "route", "add", "blackhole", f"{self.address(y)}/32")
        self.cut_links.add(frozenset((a, b)))

    def heal(self, a, b):
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.namespace(x), "route", "del", "blackhole", f"{self.address(y)}/32", check=False)
        self.cut_links.discard(frozenset((a, b)))

    def isolate(self, node):
        """Cuts `node` off from every other node; clients still reach it."""
        for other in self.nodes:
            if other != node:
                self.cut(node, other)

    def heal_all(self):
        for link in list(self.cut_links):
            self.heal(*link)

    def close(self):
        for kind, name in reversed(self._made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()
