"""The Java Kafka client (kafka-clients 4.3.1 from Maven Central) over SASL_SSL with
SCRAM-SHA-512 and over mutual TLS: admin, idempotent produce with compression, consume, offsets
(tests/java/ClientSmoke.java with a client properties file)."""

import subprocess

from conftest import ROOT
from security.conftest import create_user, tls_flags
from security.test_sasl import PASSWORD


def run_smoke(bootstrap, props, path):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "ClientSmoke", bootstrap,
                        "java-secure", "5000", str(path)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip() == "OK 5000"


def test_java_client_over_sasl_ssl_with_scram_sha_512(start_secure, tls_files, tmp_path):
    b = start_secure(("PLAINTEXT", "SASL_SSL"), extra=tls_flags(tls_files))
    create_user(b, "alice", PASSWORD)
    run_smoke(b.address("SASL_SSL"), {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="alice" password="{PASSWORD}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls_files["ca"]),
    }, tmp_path / "sasl.properties")


def test_java_client_over_mutual_tls(start_secure, tls_files, tmp_path):
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files, client_auth="required"))
    # Java reads a PEM key store as the key (PKCS#8) and the certificate chain in one file.
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(tls_files["client_key"].read_bytes(), password=None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_bytes(pkcs8 + tls_files["client_cert"].read_bytes())
    run_smoke(b.address("SSL"), {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls_files["ca"]),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }, tmp_path / "mtls.properties")
