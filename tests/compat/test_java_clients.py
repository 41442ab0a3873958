"""Client compatibility matrix: the Java Kafka client (kafka-clients 2.8, 3.6 and 4.x) and Spring
Kafka, from Maven Central, against one broker.

`tests/compat/java/setup` fetches each client's jars (one pom.xml profile per client) and
compiles `ClientCompat.java` once, against kafka-clients 2.8.2's API; the same classes then run
with each kafka-clients version's classpath. `SpringCompat.java` runs Spring Kafka's
KafkaTemplate, @KafkaListener containers and KafkaTransactionManager in a plain Spring context.
"""

import re
import uuid

import pytest

from conftest import Broker
from compat import harness

JAVA = harness.COMPAT / "java"
# The clients are the pom's profiles: kafka-<version> and spring-kafka-<version>.
PROFILES = re.findall(r"<id>([^<]+)</id>", (JAVA / "pom.xml").read_text())
KAFKA_VERSIONS = [p[len("kafka-"):] for p in PROFILES if p.startswith("kafka-")]
SPRING = next(p for p in PROFILES if p.startswith("spring-kafka-"))

CLIENT_CHECKS = (*harness.STANDARD_CHECKS, "transactions_send_offsets")
SPRING_CHECKS = (
    "spring_admin_create_topic",
    "spring_template_send",
    "spring_listener_receive",
    "spring_transactions",
    "spring_listener_in_transaction",
    "spring_listener_commit_resume",
)
# The program's own watchdog reports what is unfinished at DEADLINE; the subprocess timeout
# is only a backstop.
DEADLINE = 75


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory):
    harness.setup("java")
    b = Broker(tmp_path_factory.mktemp("compat-java"), name="compat-java",
               env=harness.BROKER_ENV)
    b.start()
    yield b
    b.kill()


def java(broker, main, classpath, name):
    argv = [
        "java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
        main, broker.bootstrap, f"{name}-{uuid.uuid4().hex[:8]}", str(DEADLINE),
    ]
    return harness.run_client(argv, timeout=DEADLINE + 30, cwd=JAVA)


_runs = {}


def client_run(broker, version):
    """Runs ClientCompat once per kafka-clients version (on the first test that needs it)."""
    if version not in _runs:
        _runs[version] = java(broker, "ClientCompat", f"lib-{version}/*:build/client", "java-" + version.replace(".", ""))
    return _runs[version]


@pytest.mark.parametrize("version", KAFKA_VERSIONS)
@pytest.mark.parametrize("check", CLIENT_CHECKS)
def test_kafka_clients(java_broker, version, check):
    harness.assert_check(client_run(java_broker, version), check)


@pytest.fixture(scope="module")
def spring_run(java_broker):
    return java(java_broker, "SpringCompat", f"lib-{SPRING}/*:build/spring", "spring")


@pytest.mark.parametrize("check", SPRING_CHECKS)
def test_spring_kafka(spring_run, check):
    harness.assert_check(spring_run, check)
