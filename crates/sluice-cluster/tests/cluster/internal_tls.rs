#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The internal listener over mutual TLS: three metadata voters whose certificates share an
//! authority form a group and commit; a caller without a certificate, or with one of another
//! authority, or a TLS caller at a plain listener, gets no answer and changes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{bind_voters, knows, register, wait_for};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use sluice_cluster::raft::network::{InternalRequest, InternalResponse, PeerClient};
use sluice_cluster::raft::node::{MetadataConfig, MetadataNode};
use sluice_cluster::raft::transport::{TlsConfigs, Transport};
use sluice_cluster::raft::MetadataCommand;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_util::sync::CancellationToken;

/// A certificate authority that signs node certificates for 127.0.0.1.
struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Authority { cert, key }
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        roots
    }

    /// Mutual TLS for a node named `cn` at 127.0.0.1 with a certificate of this authority,
    /// trusting this authority only.
    fn node(&self, cn: &str) -> TlsConfigs {
        self.node_trusting(cn, self)
    }

    /// ... trusting `trusted` (a stranger with its own certificate who knows the cluster's
    /// authority: only the listener's check of client certificates can stop it).
    fn node_trusting(&self, cn: &str, trusted: &Authority) -> TlsConfigs {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        TlsConfigs::new(vec![cert.der().clone()], key, trusted.roots()).unwrap()
    }

    /// A TLS client that trusts this authority and has no certificate of its own.
    fn anonymous(&self) -> TlsConfigs {
        let member = self.node("anyone");
        let client = ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(self.roots())
        .with_no_client_auth();
        TlsConfigs {
            server: member.server,
            client: Arc::new(client),
        }
    }
}

/// Sends `request` to `addr` over `transport`: the answer, or why there is none.
async fn ask(
    addr: &str,
    transport: Transport,
    request: &InternalRequest,
) -> std::io::Result<InternalResponse> {
    PeerClient::new(addr.to_string(), Arc::new(transport))
        .call(request, Duration::from_secs(5))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_with_certificates_of_one_authority_agree_and_strangers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Authority::new("cluster CA");
    let (listeners, voters) = bind_voters(3).await;
    let stop = CancellationToken::new();
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        let mut config = MetadataConfig::new(id, voters.clone(), dir.path().join(format!("n{id}")));
        config.transport = Arc::new(Transport::tls(cluster.node(&format!("node-{id}"))));
        let transport = Arc::clone(&config.transport);
        let node = MetadataNode::start(config, stop.clone()).await.unwrap();
        tokio::spawn(sluice_cluster::raft::network::serve(
            listener,
            transport,
            Arc::clone(&node),
            stop.clone(),
        ));
        nodes.insert(id, node);
    }
    wait_for("a leader over TLS", || {
        nodes.values().all(|n| n.leader().is_some())
    })
    .await;
    let leader = nodes[&1].leader().unwrap();
    let follower = *nodes.keys().find(|id| **id != leader).unwrap();
    assert_eq!(
        nodes[&follower].propose(register(7)).await.unwrap().refused,
        None
    );
    wait_for("every node to apply", || {
        nodes.values().all(|n| knows(n, 7))
    })
    .await;

    // A node of the cluster's authority is answered directly, too.
    let member = ask(
        &voters[&leader],
        Transport::tls(cluster.node("node-9")),
        &InternalRequest::ReadIndex,
    )
    .await;
    assert!(
        matches!(member, Ok(InternalResponse::ReadIndex(Ok(_)))),
        "{member:?}"
    );

    // No certificate, or one of another authority: no answer, and the proposal is not made.
    let stranger = Authority::new("another CA");
    for (who, transport) in [
        ("plain TCP", Transport::plain()),
        (
            "TLS without a certificate",
            Transport::tls(cluster.anonymous()),
        ),
        (
            "a certificate of another authority",
            Transport::tls(stranger.node_trusting("node-1", &cluster)),
        ),
    ] {
        let answer = ask(
            &voters[&leader],
            transport,
            &InternalRequest::Propose(MetadataCommand {
                records: register(66),
            }),
        )
        .await;
        assert!(answer.is_err(), "{who} was answered: {answer:?}");
    }
    // A member's proposal after them commits; the log is ordered, so had a stranger's been
    // taken it would be applied by then.
    assert_eq!(
        nodes[&leader].propose(register(67)).await.unwrap().refused,
        None
    );
    wait_for("the marker to apply", || {
        nodes.values().all(|n| knows(n, 67))
    })
    .await;
    assert!(
        nodes.values().all(|n| !knows(n, 66)),
        "a stranger's proposal applied"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_caller_at_a_plain_listener_gets_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (mut listeners, voters) = bind_voters(1).await;
    let stop = CancellationToken::new();
    let config = MetadataConfig::new(1, voters.clone(), dir.path().join("n1"));
    let node = MetadataNode::start(config, stop.clone()).await.unwrap();
    tokio::spawn(sluice_cluster::raft::network::serve(
        listeners.remove(&1).unwrap(),
        Arc::default(),
        Arc::clone(&node),
        stop.clone(),
    ));
    wait_for("the single voter to lead", || node.leader() == Some(1)).await;
    let tls = Transport::tls(Authority::new("cluster CA").node("node-2"));
    let answer = ask(&voters[&1], tls, &InternalRequest::ReadIndex).await;
    assert!(answer.is_err(), "answered: {answer:?}");
    // ... while a plain caller is.
    let plain = ask(&voters[&1], Transport::plain(), &InternalRequest::ReadIndex).await;
    assert!(
        matches!(plain, Ok(InternalResponse::ReadIndex(Ok(_)))),
        "{plain:?}"
    );
    stop.cancel();
}
