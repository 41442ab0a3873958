"""A pytest plugin that runs tests/security/test_acl.py against Apache Kafka 4.3.1 (KRaft,
StandardAuthorizer; its jars from `sluice bench compare --install-only`) instead of Sluice, to
check that those tests assert what Kafka does (not collected by itself):

    PYTHONPATH=tests tests/.venv/bin/pytest tests/security/test_acl.py -p no:cacheprovider \\
        -p security.acl_kafka_reference -k 'not security_disabled and not environment'

(The two deselected tests start brokers with Sluice's own flags and environment.) Kafka gets
the module's users at `kafka-storage format --add-scram`, a SASL_PLAINTEXT listener for the
clients, a PLAINTEXT one (User:ANONYMOUS, no super user) and SASL/PLAIN listeners for the
controller and the replicas (User:broker, a super user)."""

import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path

CLUSTER_ID = "c2x1aWNlZmFpbG92ZXJrYQ"


class KafkaReference:
    """What test_acl.py uses of SecureBroker, for one Kafka process."""

    def __init__(self, data_dir, listeners=("PLAINTEXT", "SASL_PLAINTEXT"), extra=(), env=None,
                 name="kafka"):
        from conftest import free_port
        from security.test_acl import PASSWORDS
        self.passwords = PASSWORDS
        self.data_dir = Path(data_dir)
        self.host = "127.0.0.1"
        self.port, self.sasl_port, self.internal_port, self.controller_port = \
            (free_port() for _ in range(4))
        self.ports = {"PLAINTEXT": self.port, "SASL_PLAINTEXT": self.sasl_port}
        self.extra = list(extra)  # Sluice's flags: not used
        self.proc = None
        self.log_path = None
        self.starts = 0

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    def address(self, listener):
        return f"{self.host}:{self.ports[listener]}"

    def properties(self):
        h = self.host
        users = {"broker": "broker-secret", **self.passwords}
        plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 'username="broker" password="broker-secret" '
                 + " ".join(f'user_{u}="{p}"' for u, p in users.items()) + ";")
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        path = self.data_dir.parent / "kafka.properties"
        path.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@{h}:{self.controller_port}",
            f"listeners=PLAINTEXT://{h}:{self.port},SASL_PLAINTEXT://{h}:{self.sasl_port},"
            f"INTERNAL://{h}:{self.internal_port},CONTROLLER://{h}:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{h}:{self.port},SASL_PLAINTEXT://{h}:{self.sasl_port},"
            f"INTERNAL://{h}:{self.internal_port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name=INTERNAL", "controller.listener.names=CONTROLLER",
            "sasl.mechanism.inter.broker.protocol=PLAIN", "sasl.mechanism.controller.protocol=PLAIN",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.internal.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.internal.plain.sasl.jaas.config={plain}",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.controller.plain.sasl.jaas.config={plain}",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}",
            f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={scram}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin;User:ops;User:broker",
            f"log.dirs={self.data_dir}", "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0", "num.partitions=1", "auto.create.topics.enable=true",
        ]) + "\n")
        return path

    def start(self, wait=True):
        from cluster.kafka_cluster import kafka_libs
        from conftest import ARTIFACTS, log_prefix, wait_until
        classpath = f"{kafka_libs()}/*"
        self.starts += 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log_path = ARTIFACTS / f"{log_prefix()}kafka-reference-{self.port}-{self.starts}.log"
        config = self.properties()
        if not (self.data_dir / "meta.properties").exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            users = []
            for user, password in self.passwords.items():
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    users += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
            subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format",
                            "-t", CLUSTER_ID, "-c", str(config), *users],
                           check=True, capture_output=True, timeout=120)
        self.proc = subprocess.Popen(["java", "-Xms512m", "-Xmx512m", "-cp", classpath, "kafka.Kafka",
                                      str(config)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "wb"))
        if wait:
            def listening():
                assert self.proc.poll() is None, f"Kafka exited: see {self.log_path}"
                with contextlib.suppress(OSError), socket.create_connection((self.host, self.sasl_port), 1):
                    return True
                return False
            wait_until(listening, 90, "Kafka to listen")
            time.sleep(3)  # the authorizer loads the metadata after the listeners open
        return self

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        return 0

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def pytest_collection_finish(session):
    import security.test_acl as t
    t.SecureBroker = KafkaReference
    t.create_user = lambda *args, **kwargs: None  # made at format time
