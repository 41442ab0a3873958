//! `sluice serve` settings. Each comes from, in rising precedence: the built-in default, the
//! TOML file given with `--config`, a `SLUICE_*` environment variable, a command-line flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;
use std::collections::BTreeMap;

use sluice_auth::{PrincipalMapper, SaslMechanism};
use sluice_broker::security::{ListenerConfig, SecurityConfig, SecurityProtocol};
use sluice_broker::topic_config::{self, Defaults};
use sluice_broker::BrokerConfig;
use sluice_wire::Limits;

/// Every setting is optional here; [`Settings::resolve`] fills in defaults.
#[derive(Debug, Default, Clone, clap::Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Kafka protocol listener [default: 127.0.0.1:9092]
    #[arg(long, env = "SLUICE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// host:port that clients are told to connect to [default: the listener's address]
    #[arg(long, env = "SLUICE_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// Kafka listeners, as NAME://HOST:PORT, comma-separated (instead of --listen), e.g.
    /// SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092. NAME is a security protocol
    /// (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or a name listener_security_protocol_map maps
    #[arg(long, env = "SLUICE_LISTENERS", value_delimiter = ',')]
    pub listeners: Option<Vec<String>>,
    /// What clients are told for each listener, NAME://HOST:PORT, comma-separated
    /// [default: each listener's own address]
    #[arg(long, env = "SLUICE_ADVERTISED_LISTENERS", value_delimiter = ',')]
    pub advertised_listeners: Option<Vec<String>>,
    /// Listener names → security protocols, NAME:PROTOCOL, comma-separated, e.g.
    /// CLIENTS:SASL_SSL,REPLICAS:SSL [default: each protocol's own name]
    #[arg(long, env = "SLUICE_LISTENER_SECURITY_PROTOCOL_MAP")]
    pub listener_security_protocol_map: Option<String>,
    /// TLS: the certificate chain (PEM, leaf first) of SSL and SASL_SSL listeners
    #[arg(long, env = "SLUICE_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1)
    #[arg(long, env = "SLUICE_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// TLS client certificates: none, requested or required (Kafka's ssl.client.auth)
    /// [default: none]
    #[arg(long, env = "SLUICE_TLS_CLIENT_AUTH")]
    pub tls_client_auth: Option<String>,
    /// The authorities (PEM) that client certificates must chain to; turns client
    /// certificates on
    #[arg(long, env = "SLUICE_TLS_CLIENT_CA_FILE")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Client certificate subject → principal, Kafka's ssl.principal.mapping.rules, e.g.
    /// RULE:^CN=([^,]*).*$/$1/,DEFAULT [default: DEFAULT, the whole subject]
    #[arg(long, env = "SLUICE_TLS_PRINCIPAL_MAPPING_RULES")]
    pub tls_principal_mapping_rules: Option<String>,
    /// How often the certificate files are checked for changes, which are then loaded
    /// without a restart [default: 10000]
    #[arg(long, env = "SLUICE_TLS_RELOAD_INTERVAL_MS")]
    pub tls_reload_interval_ms: Option<u64>,
    /// SASL mechanisms of SASL listeners, comma-separated: SCRAM-SHA-256, SCRAM-SHA-512,
    /// PLAIN [default: all three]
    #[arg(long, env = "SLUICE_SASL_MECHANISMS")]
    pub sasl_mechanisms: Option<String>,
    /// A SASL login holds this long, then the client must re-authenticate (KIP-368);
    /// 0: for ever [default: 0]
    #[arg(long, env = "SLUICE_CONNECTIONS_MAX_REAUTH_MS")]
    pub connections_max_reauth_ms: Option<i64>,
    /// A failed login is answered this late, longer for an address that keeps failing
    /// [default: 100]
    #[arg(long, env = "SLUICE_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS")]
    pub connection_failed_authentication_delay_ms: Option<u64>,
    /// Append security events (logins, failed logins, user changes and who made them) to
    /// this file as JSON lines [default: none]
    #[arg(long, env = "SLUICE_AUDIT_LOG_FILE")]
    pub audit_log_file: Option<PathBuf>,
    /// Also produce every security event as one JSON record to this topic (created when the
    /// first event comes; one partition, the node id as key) [default: none]
    #[arg(long, env = "SLUICE_AUDIT_LOG_TOPIC")]
    pub audit_log_topic: Option<String>,
    /// `acl`: enforce Kafka ACLs (what no ACL allows is denied); `none`: every client may do
    /// everything [default: none]
    #[arg(long, env = "SLUICE_AUTHORIZER")]
    pub authorizer: Option<String>,
    /// Principals allowed everything when the authorizer is on, `;`-separated as Kafka's
    /// super.users, e.g. 'User:admin;User:ops'
    #[arg(long, env = "SLUICE_SUPER_USERS")]
    pub super_users: Option<String>,
    /// HTTP admin listener: web console, admin API, /metrics [default: 127.0.0.1:8080]
    #[arg(long, env = "SLUICE_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Token the admin port requires (`Authorization: Bearer <token>`); required when the
    /// admin listener is not on loopback. Prefer the environment variable to the flag (other
    /// users can read a process's arguments).
    #[arg(long, env = "SLUICE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<crate::secret::Secret>,
    /// The admin port (console, admin API, /metrics) speaks HTTPS with tls_cert_file and
    /// tls_key_file [default: false]
    #[arg(long, env = "SLUICE_ADMIN_TLS")]
    pub admin_tls: Option<bool>,
    /// Data directory [default: ./data]
    #[arg(long, env = "SLUICE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// This node's id [default: 1]
    #[arg(long, env = "SLUICE_NODE_ID")]
    pub node_id: Option<i32>,
    /// Form or join a cluster: every voting node as ID@HOST:PORT, comma-separated, where
    /// HOST:PORT is that node's internal listener (Raft and replication traffic); this node
    /// listens on its own entry. Without it: a single node.
    #[arg(long, env = "SLUICE_CLUSTER")]
    pub cluster: Option<String>,
    /// A node that `--cluster` does not list joins the cluster as a non-voting member
    /// (it hosts replicas; the voters keep the metadata): its internal listener, HOST:PORT
    #[arg(long, env = "SLUICE_INTERNAL_LISTEN")]
    pub internal_listen: Option<String>,
    /// In a cluster: mutual TLS on the internal listener (Raft and the nodes' calls to each
    /// other): this node's certificate chain (PEM, leaf first), naming its internal address
    #[arg(long, env = "SLUICE_INTERNAL_TLS_CERT_FILE")]
    pub internal_tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of internal_tls_cert_file
    #[arg(long, env = "SLUICE_INTERNAL_TLS_KEY_FILE")]
    pub internal_tls_key_file: Option<PathBuf>,
    /// The authorities (PEM) every node's internal certificate must chain to: whoever holds a
    /// certificate they signed is taken for a node of the cluster
    #[arg(long, env = "SLUICE_INTERNAL_TLS_CA_FILE")]
    pub internal_tls_ca_file: Option<PathBuf>,
    /// In a cluster: the listener (by name) followers fetch from on the leaders, Kafka's
    /// inter.broker.listener.name [default: the first listener]
    #[arg(long, env = "SLUICE_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
    /// When that listener speaks TLS: the authorities (PEM) its certificates must chain to
    /// [default: internal_tls_ca_file]; followers present internal_tls_cert_file
    #[arg(long, env = "SLUICE_INTER_BROKER_TLS_CA_FILE")]
    pub inter_broker_tls_ca_file: Option<PathBuf>,
    /// When that listener speaks SASL: the mechanism followers log in with
    /// [default: SCRAM-SHA-512]
    #[arg(long, env = "SLUICE_INTER_BROKER_SASL_MECHANISM")]
    pub inter_broker_sasl_mechanism: Option<String>,
    /// When that listener speaks SASL: the user followers log in as (it needs ClusterAction)
    #[arg(long, env = "SLUICE_INTER_BROKER_SASL_USERNAME")]
    pub inter_broker_sasl_username: Option<String>,
    /// When that listener speaks SASL: that user's password (prefer the environment or the
    /// settings file to a flag, which other users can see in the process list)
    #[arg(
        long,
        env = "SLUICE_INTER_BROKER_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub inter_broker_sasl_password: Option<crate::secret::Secret>,
    /// This node's rack: replicas of a partition go to distinct racks when nodes have one
    #[arg(long, env = "SLUICE_RACK")]
    pub rack: Option<String>,
    /// In a cluster: a node whose heartbeats stop for this long is fenced and its partitions
    /// get new leaders (Kafka's `broker.session.timeout.ms`) [default: 1000]
    #[arg(long, env = "SLUICE_CLUSTER_SESSION_TIMEOUT_MS")]
    pub cluster_session_timeout_ms: Option<i64>,
    /// In a cluster: every this often the controller moves leadership back to each
    /// partition's preferred replica where that replica is live and in sync; 0 turns it off
    /// (Kafka's `leader.imbalance.check.interval.seconds`) [default: 30000]
    #[arg(long, env = "SLUICE_LEADER_BALANCE_INTERVAL_MS")]
    pub leader_balance_interval_ms: Option<i64>,
    /// Create unknown topics on Metadata and Produce requests [default: true]
    #[arg(long, env = "SLUICE_AUTO_CREATE_TOPICS", action = clap::ArgAction::Set)]
    pub auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics [default: 1]
    #[arg(long, env = "SLUICE_NUM_PARTITIONS")]
    pub num_partitions: Option<i32>,
    /// Default segment.bytes [default: 1073741824]
    #[arg(long, env = "SLUICE_LOG_SEGMENT_BYTES")]
    pub log_segment_bytes: Option<u64>,
    /// Default segment.ms [default: 604800000]
    #[arg(long, env = "SLUICE_LOG_ROLL_MS")]
    pub log_roll_ms: Option<i64>,
    /// Default retention.ms; -1 keeps forever [default: 604800000]
    #[arg(long, env = "SLUICE_LOG_RETENTION_MS", allow_negative_numbers = true)]
    pub log_retention_ms: Option<i64>,
    /// Default retention.bytes; -1 for no limit [default: -1]
    #[arg(
        long,
        env = "SLUICE_LOG_RETENTION_BYTES",
        allow_negative_numbers = true
    )]
    pub log_retention_bytes: Option<i64>,
    /// How often retention runs [default: 60000]
    #[arg(long, env = "SLUICE_LOG_RETENTION_CHECK_INTERVAL_MS")]
    pub log_retention_check_interval_ms: Option<u64>,
    /// Default flush.mode: interval or sync [default: interval]
    #[arg(long, env = "SLUICE_LOG_FLUSH_MODE")]
    pub log_flush_mode: Option<String>,
    /// Default flush.interval.ms [default: 100]
    #[arg(long, env = "SLUICE_LOG_FLUSH_INTERVAL_MS")]
    pub log_flush_interval_ms: Option<u64>,
    /// Default max.message.bytes [default: 1048588]
    #[arg(long, env = "SLUICE_MESSAGE_MAX_BYTES")]
    pub message_max_bytes: Option<i32>,
    /// Default message.timestamp.type: CreateTime or LogAppendTime [default: CreateTime]
    #[arg(long, env = "SLUICE_LOG_MESSAGE_TIMESTAMP_TYPE")]
    pub log_message_timestamp_type: Option<String>,
    /// Largest request frame accepted [default: 104857600]
    #[arg(long, env = "SLUICE_SOCKET_REQUEST_MAX_BYTES")]
    pub socket_request_max_bytes: Option<usize>,
    /// Most client connections at once [default: 10000]
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Close connections idle this long [default: 600000]
    #[arg(long, env = "SLUICE_CONNECTIONS_MAX_IDLE_MS")]
    pub connections_max_idle_ms: Option<u64>,
    /// Most connections at once from one client address; more are closed at once
    /// [default: no limit]
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Per-address exceptions to max_connections_per_ip, as Kafka's
    /// max.connections.per.ip.overrides: 'IP:COUNT,IP:COUNT' (0 refuses the address)
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS_PER_IP_OVERRIDES")]
    pub max_connections_per_ip_overrides: Option<String>,
    /// New connections per second, all listeners together; more wait to be accepted
    /// [default: no limit]
    #[arg(long, env = "SLUICE_MAX_CONNECTION_CREATION_RATE")]
    pub max_connection_creation_rate: Option<f64>,
    /// How often the log cleaner looks for compacted topics to clean [default: 15000]
    #[arg(long, env = "SLUICE_LOG_CLEANER_INTERVAL_MS")]
    pub log_cleaner_interval_ms: Option<u64>,
    /// A new consumer group waits this long for more members before its first rebalance [default: 3000]
    #[arg(long, env = "SLUICE_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    pub group_initial_rebalance_delay_ms: Option<i64>,
    /// Smallest session timeout a consumer may ask for [default: 6000]
    #[arg(long, env = "SLUICE_GROUP_MIN_SESSION_TIMEOUT_MS")]
    pub group_min_session_timeout_ms: Option<i64>,
    /// New-protocol (KIP-848) consumer groups: a member not heard from this long is removed [default: 45000]
    #[arg(long, env = "SLUICE_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
    pub group_consumer_session_timeout_ms: Option<i64>,
    /// New-protocol (KIP-848) consumer groups: how often members heartbeat [default: 5000]
    #[arg(long, env = "SLUICE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
    pub group_consumer_heartbeat_interval_ms: Option<i32>,
    /// Committed offsets of an empty group are kept this long [default: 10080 (7 days)]
    #[arg(long, env = "SLUICE_OFFSETS_RETENTION_MINUTES")]
    pub offsets_retention_minutes: Option<i64>,
    /// Threads serving requests [default: half the cores, at least 1]
    #[arg(long, env = "SLUICE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Log filter, e.g. info or sluice_broker=debug [default: info; RUST_LOG also works]
    #[arg(long, env = "SLUICE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// The outbox relay to run in-process (the TOML file's `[outbox]` table only; the same
    /// settings as `sluice outbox`, `brokers` defaulting to this broker)
    #[arg(skip)]
    pub outbox: Option<sluice_outbox::OutboxConfig>,
}

/// Everything `serve` needs, resolved.
#[derive(Debug)]
pub struct Resolved {
    pub broker: BrokerConfig,
    /// The Kafka listeners to bind, in the order given (the first is the one
    /// `broker.advertised_host` names).
    pub listeners: Vec<Listener>,
    /// Set when a listener speaks TLS.
    pub tls: Option<crate::tls::TlsSettings>,
    pub admin_listen: SocketAddr,
    pub admin_token: Option<crate::secret::Secret>,
    /// The admin port's TLS (the Kafka listeners' certificate, no client certificates).
    pub admin_tls: Option<crate::tls::TlsSettings>,
    pub limits: Limits,
    pub worker_threads: Option<usize>,
    pub log_level: String,
    pub outbox: Option<sluice_outbox::OutboxConfig>,
    /// `--cluster`: the voters by node id, each with its internal listener.
    pub cluster: Option<std::collections::BTreeMap<i32, String>>,
    /// This node's internal listener when `cluster` does not list it (a learner).
    pub internal_listen: Option<String>,
    /// Mutual TLS on the internal listener.
    pub internal_tls: Option<crate::internal_tls::InternalTlsSettings>,
    /// Where and how followers fetch from leaders (a cluster only).
    pub inter_broker: Option<crate::inter_broker::InterBrokerSettings>,
    pub rack: Option<String>,
    pub cluster_session_timeout_ms: i64,
    /// 0: off.
    pub leader_balance_interval_ms: i64,
}

/// A cluster's id, the same on every node: derived from its voters (22 URL-safe base64
/// characters, like Kafka's).
fn cluster_id_of(voters: &std::collections::BTreeMap<i32, String>) -> String {
    let text: String = voters.iter().map(|(id, a)| format!("{id}@{a},")).collect();
    let mut bytes = [0u8; 16];
    for (seed, chunk) in bytes.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&crc32c::crc32c_append(seed as u32, text.as_bytes()).to_be_bytes());
    }
    sluice_broker::metadata_store::cluster_id_from(bytes)
}

/// Parses `1@host:port,2@host:port`: ids unique and positive, addresses host:port.
pub fn parse_cluster(spec: &str) -> anyhow::Result<std::collections::BTreeMap<i32, String>> {
    let mut voters = std::collections::BTreeMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once('@')
            .with_context(|| format!("cluster entry '{entry}' is not ID@HOST:PORT"))?;
        let id: i32 = id.parse().ok().filter(|id| *id >= 0).with_context(|| {
            format!("cluster entry '{entry}': '{id}' is not a node id (0 or more)")
        })?;
        let (host, port) = addr
            .rsplit_once(':')
            .with_context(|| format!("cluster entry '{entry}': '{addr}' is not HOST:PORT"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            bail!("cluster entry '{entry}': '{addr}' is not HOST:PORT");
        }
        if voters.insert(id, addr.to_string()).is_some() {
            bail!("cluster names node {id} twice");
        }
    }
    if voters.is_empty() {
        bail!("cluster is empty: give ID@HOST:PORT for every voting node");
    }
    Ok(voters)
}

/// A Kafka listener to bind.
#[derive(Debug, Clone)]
pub struct Listener {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
}

/// The listener an in-process relay left without `brokers` publishes through: the first whose
/// protocol is its `[outbox.client] security.protocol`; without one, the first PLAINTEXT
/// listener, else the first listener, whose protocol it then logs in with (a SASL listener
/// needs the `[outbox.client]` login: `validate` names what is missing).
fn outbox_via_listener(
    listeners: &[Listener],
    outbox: &mut sluice_outbox::OutboxConfig,
) -> anyhow::Result<()> {
    let wanted = outbox
        .client
        .get("security.protocol")
        .map(str::to_ascii_uppercase);
    let listener = match &wanted {
        Some(protocol) => listeners.iter().find(|l| l.protocol.name() == protocol),
        None => listeners
            .iter()
            .find(|l| l.protocol == SecurityProtocol::Plaintext)
            .or_else(|| listeners.first()),
    };
    let Some(listener) = listener else {
        let names: Vec<String> = listeners
            .iter()
            .map(|l| format!("{} ({})", l.name, l.protocol.name()))
            .collect();
        bail!(
            "[outbox.client] security.protocol={}: this broker has no such listener (it has {}); \
             set [outbox] brokers to the address to publish to",
            wanted.unwrap_or_default(),
            names.join(", ")
        );
    };
    outbox.brokers = format!("{}:{}", listener.advertised_host, listener.advertised_port);
    if wanted.is_none() && listener.protocol != SecurityProtocol::Plaintext {
        outbox
            .client
            .set("security.protocol", listener.protocol.name());
    }
    Ok(())
}

/// `NAME://HOST:PORT` → (NAME, HOST, PORT).
fn parse_listener(setting: &str, spec: &str) -> anyhow::Result<(String, String, u16)> {
    let (name, addr) = spec.trim().split_once("://").with_context(|| {
        format!("{setting} entry '{spec}' is not NAME://HOST:PORT (e.g. SASL_SSL://0.0.0.0:9093)")
    })?;
    let (host, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("{setting} entry '{spec}': '{addr}' is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("{setting} entry '{spec}': '{port}' is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("{setting} entry '{spec}': '{name}' is not a listener name (letters, digits, _)");
    }
    Ok((name.to_string(), host.to_string(), port))
}

/// The listeners and the authentication settings, from `listen`/`advertised_listener` (one
/// PLAINTEXT listener, as before) or `listeners`/`advertised_listeners`.
fn resolve_listeners(s: &Settings) -> anyhow::Result<(Vec<Listener>, SecurityConfig)> {
    let mut map: BTreeMap<String, SecurityProtocol> = BTreeMap::new();
    if let Some(spec) = &s.listener_security_protocol_map {
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, protocol) = entry.split_once(':').with_context(|| {
                format!("listener_security_protocol_map entry '{entry}' is not NAME:PROTOCOL")
            })?;
            let protocol = SecurityProtocol::parse(protocol).with_context(|| {
                format!(
                    "listener_security_protocol_map entry '{entry}': '{protocol}' is not \
                     PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                )
            })?;
            map.insert(name.to_string(), protocol);
        }
    }
    let mut listeners = Vec::new();
    match (&s.listeners, s.listen) {
        (Some(_), Some(_)) => bail!("set either listen or listeners, not both"),
        (Some(specs), None) => {
            for spec in specs.iter().filter(|l| !l.trim().is_empty()) {
                let (name, host, port) = parse_listener("listeners", spec)?;
                let protocol = map
                    .get(&name)
                    .copied()
                    .or_else(|| SecurityProtocol::parse(&name))
                    .with_context(|| {
                        format!(
                            "listener {name}: not a security protocol (PLAINTEXT, SSL, \
                             SASL_PLAINTEXT, SASL_SSL); map it in listener_security_protocol_map"
                        )
                    })?;
                let ip: std::net::IpAddr = if host.is_empty() {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                } else {
                    host.parse().with_context(|| {
                        format!("listener {name}: '{host}' is not an IP address to bind")
                    })?
                };
                if listeners.iter().any(|l: &Listener| l.name == name) {
                    bail!("listeners name {name} twice");
                }
                listeners.push(Listener {
                    name,
                    protocol,
                    bind: SocketAddr::new(ip, port),
                    advertised_host: String::new(),
                    advertised_port: 0,
                });
            }
            if listeners.is_empty() {
                bail!("listeners is empty");
            }
        }
        (None, listen) => listeners.push(Listener {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bind: listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9092))),
            advertised_host: String::new(),
            advertised_port: 0,
        }),
    }
    let mut advertised: BTreeMap<String, (String, u16)> = BTreeMap::new();
    for spec in s.advertised_listeners.iter().flatten() {
        if spec.trim().is_empty() {
            continue;
        }
        let (name, host, port) = parse_listener("advertised_listeners", spec)?;
        if !listeners.iter().any(|l| l.name == name) {
            bail!("advertised_listeners names {name}, which is not a listener");
        }
        if host.is_empty() {
            bail!("advertised_listeners entry '{spec}' has no host");
        }
        advertised.insert(name, (host, port));
    }
    if let Some(a) = &s.advertised_listener {
        if s.advertised_listeners.is_some() {
            bail!("set either advertised_listener or advertised_listeners, not both");
        }
        let (host, port) = a
            .rsplit_once(':')
            .with_context(|| format!("advertised_listener '{a}' is not host:port"))?;
        let port: u16 = port
            .parse()
            .with_context(|| format!("advertised_listener '{a}' has a bad port"))?;
        advertised.insert(listeners[0].name.clone(), (host.to_string(), port));
    }
    for l in &mut listeners {
        let (host, port) = match advertised.get(&l.name) {
            Some((host, port)) => (host.clone(), *port),
            None if l.bind.ip().is_unspecified() => bail!(
                "listener {} binds {}: set advertised_listeners (or advertised_listener) to the \
                 HOST:PORT clients should connect to",
                l.name,
                l.bind
            ),
            None => (l.bind.ip().to_string(), l.bind.port()),
        };
        l.advertised_host = host;
        l.advertised_port = i32::from(port);
    }
    let mut security = SecurityConfig {
        listeners: listeners
            .iter()
            .map(|l| ListenerConfig {
                name: l.name.clone(),
                protocol: l.protocol,
                advertised_host: l.advertised_host.clone(),
                advertised_port: l.advertised_port,
            })
            .collect(),
        ..SecurityConfig::default()
    };
    if let Some(spec) = &s.sasl_mechanisms {
        let mut mechanisms = Vec::new();
        for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let m = SaslMechanism::from_name(name).with_context(|| {
                format!("sasl_mechanisms: '{name}' is not SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
            })?;
            if !mechanisms.contains(&m) {
                mechanisms.push(m);
            }
        }
        if mechanisms.is_empty() {
            bail!("sasl_mechanisms is empty");
        }
        security.sasl_mechanisms = mechanisms;
    }
    if let Some(rules) = &s.tls_principal_mapping_rules {
        let mapper = PrincipalMapper::parse(rules)
            .with_context(|| format!("tls_principal_mapping_rules '{rules}'"))?;
        security.principal_mapper = Some(std::sync::Arc::new(mapper));
    }
    security.max_reauth_ms = match s.connections_max_reauth_ms {
        None | Some(0) => None,
        Some(ms) if ms < 1_000 => {
            bail!("connections_max_reauth_ms must be 0 (off) or at least 1000, not {ms}")
        }
        Some(ms) => Some(ms),
    };
    if let Some(ms) = s.connection_failed_authentication_delay_ms {
        if ms > 60_000 {
            bail!("connection_failed_authentication_delay_ms must be at most 60000, not {ms}");
        }
        security.failed_auth_delay_ms = ms;
    }
    security.authorizer.enabled = match s.authorizer.as_deref().map(str::trim) {
        None | Some("") | Some("none") => false,
        Some("acl") => true,
        Some(other) => bail!("authorizer must be 'acl' or 'none', not '{other}'"),
    };
    if let Some(spec) = &s.super_users {
        for principal in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            sluice_auth::acl::validate_principal(principal)
                .with_context(|| format!("super_users: '{principal}'"))?;
            security
                .authorizer
                .super_users
                .insert(principal.to_string());
        }
        if !security.authorizer.enabled && !security.authorizer.super_users.is_empty() {
            bail!("super_users is set but the authorizer is off: add authorizer = acl");
        }
    }
    security.audit_log_file = s
        .audit_log_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty());
    security.audit_log_topic = match s.audit_log_topic.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(name) => {
            if let Err(e) = sluice_broker::topics::validate_topic_name(name) {
                bail!("audit_log_topic '{name}': {e}");
            }
            if sluice_broker::topics::is_internal(name) {
                bail!("audit_log_topic '{name}' is one of the broker's internal topics");
            }
            Some(name.to_string())
        }
    };
    Ok((listeners, security))
}

/// The per-address connection limits and the creation rate, checked.
fn connection_quotas(
    per_ip: Option<usize>,
    overrides: Option<&str>,
    rate: Option<f64>,
) -> anyhow::Result<sluice_wire::ConnectionQuotas> {
    let mut quotas = sluice_wire::ConnectionQuotas {
        max_per_ip: per_ip,
        ..Default::default()
    };
    if per_ip == Some(0) {
        bail!("max_connections_per_ip must be at least 1 (use the overrides to refuse an address)");
    }
    for entry in overrides
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let parsed = entry.rsplit_once(':').and_then(|(ip, n)| {
            Some((
                ip.trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .ok()?,
                n.parse::<usize>().ok()?,
            ))
        });
        let Some((ip, n)) = parsed else {
            bail!("max_connections_per_ip_overrides: '{entry}' is not IP:COUNT");
        };
        quotas.per_ip_overrides.insert(ip.to_canonical(), n);
    }
    if let Some(r) = rate {
        if !r.is_finite() || r <= 0.0 {
            bail!("max_connection_creation_rate must be a positive number of connections per second, not {r}");
        }
        quotas.max_creation_rate = Some(r);
    }
    Ok(quotas)
}

macro_rules! overlay {
    ($high:expr, $low:expr, $($field:ident),*) => {
        Settings { $($field: $high.$field.or($low.$field)),* }
    };
}

impl Settings {
    /// Reads a TOML settings file (keys as the flag names with `_`, e.g. `data_dir`).
    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("in config file {}", path.display()))
    }

    /// `self` (flags and environment) over `file`.
    pub fn over(self, file: Settings) -> Settings {
        overlay!(
            self,
            file,
            listen,
            advertised_listener,
            listeners,
            advertised_listeners,
            listener_security_protocol_map,
            tls_cert_file,
            tls_key_file,
            tls_client_auth,
            tls_client_ca_file,
            tls_principal_mapping_rules,
            tls_reload_interval_ms,
            sasl_mechanisms,
            connections_max_reauth_ms,
            connection_failed_authentication_delay_ms,
            audit_log_file,
            audit_log_topic,
            authorizer,
            super_users,
            admin_listen,
            admin_token,
            admin_tls,
            data_dir,
            node_id,
            cluster,
            internal_listen,
            internal_tls_cert_file,
            internal_tls_key_file,
            internal_tls_ca_file,
            inter_broker_listener_name,
            inter_broker_tls_ca_file,
            inter_broker_sasl_mechanism,
            inter_broker_sasl_username,
            inter_broker_sasl_password,
            rack,
            cluster_session_timeout_ms,
            leader_balance_interval_ms,
            auto_create_topics,
            num_partitions,
            log_segment_bytes,
            log_roll_ms,
            log_retention_ms,
            log_retention_bytes,
            log_retention_check_interval_ms,
            log_flush_mode,
            log_flush_interval_ms,
            message_max_bytes,
            log_message_timestamp_type,
            socket_request_max_bytes,
            max_connections,
            connections_max_idle_ms,
            max_connections_per_ip,
            max_connections_per_ip_overrides,
            max_connection_creation_rate,
            log_cleaner_interval_ms,
            group_initial_rebalance_delay_ms,
            group_min_session_timeout_ms,
            group_consumer_session_timeout_ms,
            group_consumer_heartbeat_interval_ms,
            offsets_retention_minutes,
            worker_threads,
            log_level,
            outbox
        )
    }

    pub fn resolve(self) -> anyhow::Result<Resolved> {
        let (listeners, security) = resolve_listeners(&self)?;
        let admin_tls_on = self.admin_tls.unwrap_or(false);
        let tls = crate::tls::TlsSettings::resolve(
            listeners.iter().any(|l| l.protocol.uses_tls()) || admin_tls_on,
            self.tls_cert_file.clone(),
            self.tls_key_file.clone(),
            self.tls_client_auth.as_deref(),
            self.tls_client_ca_file.clone(),
            self.tls_reload_interval_ms,
        )?;
        let (advertised_host, advertised_port) = listeners
            .first()
            .map(|l| (l.advertised_host.clone(), l.advertised_port))
            .context("no Kafka listener")?;
        let mut defaults = Defaults::default();
        let mut set = |name: &str, value: Option<String>| -> anyhow::Result<()> {
            if let Some(v) = value {
                defaults
                    .set(name, v)
                    .with_context(|| format!("broker default for {name}"))?;
            }
            Ok(())
        };
        set(
            topic_config::SEGMENT_BYTES,
            self.log_segment_bytes.map(|v| v.to_string()),
        )?;
        set(
            topic_config::SEGMENT_MS,
            self.log_roll_ms.map(|v| v.to_string()),
        )?;
        set(
            topic_config::RETENTION_MS,
            self.log_retention_ms.map(|v| v.to_string()),
        )?;
        set(
            topic_config::RETENTION_BYTES,
            self.log_retention_bytes.map(|v| v.to_string()),
        )?;
        set(topic_config::FLUSH_MODE, self.log_flush_mode.clone())?;
        set(
            topic_config::FLUSH_INTERVAL_MS,
            self.log_flush_interval_ms.map(|v| v.to_string()),
        )?;
        set(
            topic_config::MAX_MESSAGE_BYTES,
            self.message_max_bytes.map(|v| v.to_string()),
        )?;
        set(
            topic_config::TIMESTAMP_TYPE,
            self.log_message_timestamp_type.clone(),
        )?;
        let num_partitions = self.num_partitions.unwrap_or(1);
        if num_partitions < 1 {
            bail!("num_partitions must be at least 1, not {num_partitions}");
        }
        let retention_check_ms = self.log_retention_check_interval_ms.unwrap_or(60_000);
        if retention_check_ms == 0 {
            bail!("log_retention_check_interval_ms must be at least 1");
        }
        let mut groups = sluice_broker::group::coordinator::GroupConfig::default();
        if let Some(v) = self.group_initial_rebalance_delay_ms {
            groups.initial_rebalance_delay_ms = v.max(0);
        }
        if let Some(v) = self.group_min_session_timeout_ms {
            if v < 1 {
                bail!("group_min_session_timeout_ms must be at least 1");
            }
            groups.min_session_timeout_ms = v;
        }
        if let Some(v) = self.group_consumer_session_timeout_ms {
            if v < 1 {
                bail!("group_consumer_session_timeout_ms must be at least 1");
            }
            groups.consumer.session_timeout_ms = v;
        }
        if let Some(v) = self.group_consumer_heartbeat_interval_ms {
            if v < 1 || i64::from(v) >= groups.consumer.session_timeout_ms {
                bail!(
                    "group_consumer_heartbeat_interval_ms must be at least 1 and below the session timeout ({} ms)",
                    groups.consumer.session_timeout_ms
                );
            }
            groups.consumer.heartbeat_interval_ms = v;
        }
        if let Some(v) = self.offsets_retention_minutes {
            if v < 1 {
                bail!("offsets_retention_minutes must be at least 1");
            }
            groups.offsets_retention_ms = v * 60_000;
        }
        let node_id = self.node_id.unwrap_or(1);
        if node_id < 0 {
            bail!("node_id must be 0 or more, not {node_id}");
        }
        let cluster = self.cluster.as_deref().map(parse_cluster).transpose()?;
        let internal_listen = self.internal_listen.filter(|a| !a.is_empty());
        match (&cluster, &internal_listen) {
            (Some(voters), None) if !voters.contains_key(&node_id) => bail!(
                "cluster does not name this node (node_id {node_id}): list it with its internal \
                 listener, or give it internal_listen to join as a non-voting member"
            ),
            (Some(voters), Some(addr)) => match voters.get(&node_id) {
                Some(listed) if listed != addr => bail!(
                    "internal_listen {addr} differs from this node's entry in cluster ({listed})"
                ),
                _ => {
                    addr.parse::<SocketAddr>().with_context(|| {
                        format!("internal_listen '{addr}' is not HOST:PORT with an IP address")
                    })?;
                }
            },
            (None, Some(_)) => bail!("internal_listen needs cluster (the voters to join)"),
            _ => {}
        }
        let broker = BrokerConfig {
            node_id,
            cluster_id: cluster.as_ref().map(cluster_id_of),
            advertised_host,
            advertised_port,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("./data")),
            auto_create_topics: self.auto_create_topics.unwrap_or(true),
            num_partitions,
            topic_defaults: defaults,
            retention_check_interval: Duration::from_millis(retention_check_ms),
            cleaner_interval: Duration::from_millis(
                self.log_cleaner_interval_ms.unwrap_or(15_000).max(1),
            ),
            groups,
            clustered: cluster.is_some(),
            security,
            ..BrokerConfig::default()
        };
        let limits = Limits {
            max_frame_bytes: self.socket_request_max_bytes.unwrap_or(100 * 1024 * 1024),
            max_connections: self.max_connections.unwrap_or(10_000),
            idle_timeout: Duration::from_millis(self.connections_max_idle_ms.unwrap_or(600_000)),
            quotas: connection_quotas(
                self.max_connections_per_ip,
                self.max_connections_per_ip_overrides.as_deref(),
                self.max_connection_creation_rate,
            )?,
            ..Limits::default()
        };
        if limits.max_connections == 0 || limits.max_frame_bytes < 64 {
            bail!("max_connections must be at least 1 and socket_request_max_bytes at least 64");
        }
        let admin_listen = self
            .admin_listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
        let admin_token = self.admin_token.filter(|t| !t.is_empty());
        if let Some(t) = &admin_token {
            if t.expose().len() < 16 {
                bail!("admin_token must be at least 16 characters");
            }
        }
        if !admin_listen.ip().is_loopback() && admin_token.is_none() {
            bail!(
                "admin_listen {admin_listen} is reachable from other machines: set admin_token \
                 (SLUICE_ADMIN_TOKEN) so that the console and admin API need it"
            );
        }
        // The admin port takes the listeners' certificate, never client certificates (a
        // browser has none); its login is a SCRAM user's password or the admin token.
        let admin_tls = match (&tls, admin_tls_on) {
            (Some(t), true) => Some(crate::tls::TlsSettings {
                client_auth: crate::tls::ClientAuth::None,
                client_ca: None,
                ..t.clone()
            }),
            _ => None,
        };
        // Checked below, and by TlsSettings::resolve, only where some TLS file is watched.
        let reload_ms = self.tls_reload_interval_ms.unwrap_or(10_000);
        let reload_interval = std::time::Duration::from_millis(reload_ms);
        let internal_tls = crate::internal_tls::InternalTlsSettings::resolve(
            self.internal_tls_cert_file,
            self.internal_tls_key_file,
            self.internal_tls_ca_file,
            cluster.is_some(),
            reload_interval,
        )?;
        let inter_broker = crate::inter_broker::InterBrokerSettings::resolve(
            crate::inter_broker::Given {
                listener_name: self.inter_broker_listener_name.filter(|n| !n.is_empty()),
                tls_ca_file: self.inter_broker_tls_ca_file,
                sasl_mechanism: self.inter_broker_sasl_mechanism,
                sasl_username: self.inter_broker_sasl_username,
                sasl_password: self
                    .inter_broker_sasl_password
                    .map(crate::secret::Secret::into_inner),
            },
            &listeners,
            cluster.is_some(),
            internal_tls.as_ref(),
            tls.as_ref()
                .is_some_and(|t| t.client_auth == crate::tls::ClientAuth::Required),
            reload_interval,
        )?;
        let watched =
            internal_tls.is_some() || inter_broker.as_ref().is_some_and(|i| i.authority.is_some());
        if watched && reload_ms < 100 {
            bail!("tls_reload_interval_ms must be at least 100");
        }
        // Checked before anything binds.
        let outbox = match self.outbox {
            Some(mut outbox) => {
                if outbox.brokers.trim().is_empty() {
                    outbox_via_listener(&listeners, &mut outbox)?;
                }
                outbox.validate().context("[outbox]")?;
                Some(outbox)
            }
            None => None,
        };
        Ok(Resolved {
            broker,
            listeners,
            tls,
            admin_listen,
            admin_token,
            admin_tls,
            limits,
            worker_threads: match self.worker_threads {
                Some(0) => bail!("worker_threads must be at least 1"),
                n => n,
            },
            log_level: self.log_level.unwrap_or_else(|| "info".into()),
            outbox,
            internal_tls,
            inter_broker,
            cluster,
            internal_listen,
            rack: self.rack.filter(|r| !r.is_empty()),
            cluster_session_timeout_ms: match self.cluster_session_timeout_ms {
                // Heartbeats go every 100 ms: a shorter session would fence healthy nodes.
                Some(ms) if !(300..=60_000).contains(&ms) => {
                    bail!("cluster_session_timeout_ms must be between 300 and 60000, not {ms}")
                }
                Some(ms) => ms,
                None => 1_000,
            },
            leader_balance_interval_ms: match self.leader_balance_interval_ms {
                Some(ms) if ms != 0 && !(1_000..=86_400_000).contains(&ms) => bail!(
                    "leader_balance_interval_ms must be 0 (off) or between 1000 and 86400000, not {ms}"
                ),
                Some(ms) => ms,
                None => 30_000,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_log::FlushMode;

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let file: Settings = toml::from_str(
            "listen = \"127.0.0.1:19092\"\ndata_dir = \"/tmp/x\"\nlog_flush_mode = \"sync\"\nnum_partitions = 4\n",
        )
        .unwrap();
        let flags = Settings {
            listen: Some("127.0.0.1:29092".parse().unwrap()),
            ..Settings::default()
        };
        let r = flags.over(file).resolve().unwrap();
        assert_eq!(r.listeners[0].bind.port(), 29092);
        assert_eq!(r.broker.advertised_port, 29092);
        assert_eq!(r.broker.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(r.broker.num_partitions, 4);
        let log = topic_config::resolve(&Default::default(), &r.broker.topic_defaults).unwrap();
        assert_eq!(log.flush, FlushMode::Sync);
        assert_eq!(r.admin_listen.port(), 8080);
    }

    #[test]
    fn a_cluster_spec_is_checked_and_names_one_cluster_id() {
        let voters = parse_cluster("1@127.0.0.1:19101, 2@127.0.0.1:19102,3@h:1").unwrap();
        assert_eq!(voters.len(), 3);
        assert_eq!(voters[&2], "127.0.0.1:19102");
        let id = cluster_id_of(&voters);
        assert_eq!(id.len(), 22);
        assert_eq!(
            id,
            cluster_id_of(&parse_cluster("3@h:1,2@127.0.0.1:19102,1@127.0.0.1:19101").unwrap())
        );
        assert_ne!(
            id,
            cluster_id_of(&parse_cluster("1@127.0.0.1:19101").unwrap())
        );
        for (bad, says) in [
            ("", "empty"),
            ("1=127.0.0.1:1", "ID@HOST:PORT"),
            ("x@127.0.0.1:1", "node id"),
            ("1@127.0.0.1", "HOST:PORT"),
            ("1@:9", "HOST:PORT"),
            ("1@a:1,1@b:2", "twice"),
        ] {
            let err = parse_cluster(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        let missing = Settings {
            node_id: Some(4),
            cluster: Some("1@a:1,2@b:2".into()),
            ..Settings::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(missing.contains("node_id 4"), "{missing}");
        // A node outside the voters joins with its own internal listener.
        let learner = Settings {
            node_id: Some(4),
            cluster: Some("1@127.0.0.1:1,2@127.0.0.1:2".into()),
            internal_listen: Some("127.0.0.1:4".into()),
            ..Settings::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(learner.internal_listen.as_deref(), Some("127.0.0.1:4"));
        for (node, internal, cluster, says) in [
            (1, "127.0.0.1:9", Some("1@127.0.0.1:1"), "differs"),
            (4, "nowhere", Some("1@127.0.0.1:1"), "HOST:PORT"),
            (4, "127.0.0.1:4", None, "needs cluster"),
        ] {
            let err = Settings {
                node_id: Some(node),
                cluster: cluster.map(str::to_string),
                internal_listen: Some(internal.into()),
                ..Settings::default()
            }
            .resolve()
            .unwrap_err();
            assert!(format!("{err:#}").contains(says), "{internal}: {err:#}");
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let err = toml::from_str::<Settings>("listne = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("listne"), "{err}");
        let bad = Settings {
            log_flush_mode: Some("never".into()),
            ..Settings::default()
        };
        assert!(format!("{:#}", bad.resolve().unwrap_err()).contains("flush.mode"));
        let unspecified = Settings {
            listen: Some("0.0.0.0:9092".parse().unwrap()),
            ..Settings::default()
        };
        assert!(unspecified
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("advertised_listener"));
    }

    #[test]
    fn several_listeners_with_their_protocols_and_advertised_addresses() {
        let s = Settings {
            listeners: Some(vec![
                "SASL_SSL://0.0.0.0:9093".into(),
                "PLAINTEXT://127.0.0.1:9092".into(),
                "REPLICAS://127.0.0.1:9094".into(),
            ]),
            advertised_listeners: Some(vec!["SASL_SSL://broker1.example:9093".into()]),
            listener_security_protocol_map: Some("REPLICAS:SSL".into()),
            tls_cert_file: Some("/tmp/c.pem".into()),
            tls_key_file: Some("/tmp/k.pem".into()),
            sasl_mechanisms: Some("SCRAM-SHA-512".into()),
            connections_max_reauth_ms: Some(60_000),
            ..Settings::default()
        };
        let r = s.resolve().unwrap();
        let l: Vec<_> = r
            .listeners
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.protocol,
                    l.advertised_host.as_str(),
                    l.advertised_port,
                )
            })
            .collect();
        assert_eq!(
            l,
            [
                (
                    "SASL_SSL",
                    SecurityProtocol::SaslSsl,
                    "broker1.example",
                    9093
                ),
                ("PLAINTEXT", SecurityProtocol::Plaintext, "127.0.0.1", 9092),
                ("REPLICAS", SecurityProtocol::Ssl, "127.0.0.1", 9094),
            ]
        );
        assert_eq!(r.broker.advertised_host, "broker1.example");
        assert!(r.tls.is_some());
        let security = &r.broker.security;
        assert_eq!(
            security.sasl_mechanisms,
            [SaslMechanism::Scram(sluice_auth::ScramMechanism::Sha512)]
        );
        assert_eq!(security.max_reauth_ms, Some(60_000));
    }

    #[test]
    fn bad_listener_settings_are_refused_with_a_message_naming_them() {
        let refused = |s: Settings| format!("{:#}", s.resolve().unwrap_err());
        let with = |listeners: &[&str]| Settings {
            listeners: Some(listeners.iter().map(|l| l.to_string()).collect()),
            ..Settings::default()
        };
        assert!(refused(with(&["HTTPS://127.0.0.1:1"])).contains("HTTPS"));
        assert!(refused(with(&["127.0.0.1:9092"])).contains("NAME://HOST:PORT"));
        assert!(refused(with(&["PLAINTEXT://127.0.0.1:x"])).contains("not a port"));
        assert!(refused(with(&["PLAINTEXT://0.0.0.0:9092"])).contains("advertised"));
        assert!(refused(with(&["PLAINTEXT://a:1", "PLAINTEXT://b:2"])).contains("bind"));
        assert!(refused(with(&[
            "PLAINTEXT://127.0.0.1:1",
            "PLAINTEXT://127.0.0.1:2"
        ]))
        .contains("twice"));
        assert!(refused(with(&["SSL://127.0.0.1:1"])).contains("tls_cert_file and tls_key_file"));
        assert!(refused(Settings {
            listen: Some("127.0.0.1:1".parse().unwrap()),
            ..with(&["PLAINTEXT://127.0.0.1:2"])
        })
        .contains("either listen or listeners"));
        assert!(refused(Settings {
            sasl_mechanisms: Some("GSSAPI".into()),
            ..with(&["SASL_PLAINTEXT://127.0.0.1:2"])
        })
        .contains("GSSAPI"));
        assert!(refused(Settings {
            tls_principal_mapping_rules: Some("RULE:^CN=(.*$/$1/".into()),
            ..with(&["SASL_PLAINTEXT://127.0.0.1:2"])
        })
        .contains("tls_principal_mapping_rules"));
        assert!(refused(Settings {
            connections_max_reauth_ms: Some(10),
            ..with(&["SASL_PLAINTEXT://127.0.0.1:2"])
        })
        .contains("connections_max_reauth_ms"));
        assert!(refused(Settings {
            advertised_listeners: Some(vec!["SSL://h:1".into()]),
            ..with(&["PLAINTEXT://127.0.0.1:2"])
        })
        .contains("not a listener"));
    }

    #[test]
    fn an_in_process_relay_publishes_through_the_listener_its_login_fits() {
        let listener = |name: &str, protocol, port| Listener {
            name: name.into(),
            protocol,
            bind: SocketAddr::from(([127, 0, 0, 1], port)),
            advertised_host: "broker.example".into(),
            advertised_port: i32::from(port),
        };
        let listeners = [
            listener("SASL_SSL", SecurityProtocol::SaslSsl, 9093),
            listener("INTERNAL", SecurityProtocol::Plaintext, 9092),
            listener("SSL", SecurityProtocol::Ssl, 9094),
        ];
        let chosen = |protocol: Option<&str>, listeners: &[Listener]| {
            let mut cfg = sluice_outbox::OutboxConfig::new("postgres://a@h:1/d", "outbox", "");
            if let Some(p) = protocol {
                cfg.client.set("security.protocol", p);
            }
            outbox_via_listener(listeners, &mut cfg)
                .map(|()| (cfg.brokers, cfg.client.protocol()))
                .map_err(|e| e.to_string())
        };
        // No login given: a PLAINTEXT listener, wherever it is in the list.
        assert_eq!(
            chosen(None, &listeners),
            Ok(("broker.example:9092".into(), "PLAINTEXT".into()))
        );
        // The protocol asked for, in any case, at its advertised address.
        assert_eq!(
            chosen(Some("sasl_ssl"), &listeners),
            Ok(("broker.example:9093".into(), "SASL_SSL".into()))
        );
        // No PLAINTEXT listener: the first, logging in with its protocol.
        assert_eq!(
            chosen(None, &listeners[2..]),
            Ok(("broker.example:9094".into(), "SSL".into()))
        );
        let none = chosen(Some("SASL_PLAINTEXT"), &listeners).unwrap_err();
        assert!(
            none.contains("no such listener") && none.contains("SASL_SSL (SASL_SSL)"),
            "{none}"
        );
    }
}
