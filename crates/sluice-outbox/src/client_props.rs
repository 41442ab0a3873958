//! How the relay's Kafka clients log in to Sluice: `security.protocol`, the `sasl.*` and `ssl.*`
//! properties and `client.id`, under librdkafka's names (the same as the Java client's, except
//! that certificates are PEM files: `ssl.ca.location`, `ssl.certificate.location`,
//! `ssl.key.location`). Given as the `[outbox.client]` TOML table, a properties file
//! (`--client-config`, as Kafka's tools take `--command-config`) or `--client-property K=V`.
//!
//! Only these may be set: the relay's exactly-once delivery depends on the producer settings it
//! chooses itself (transactional id, acks, idempotence, isolation level). The values are checked
//! before anything connects, and secrets never appear in `Debug` or in messages.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::BaseProducer;
use serde::{Deserialize, Deserializer};

use crate::error::OutboxError;

/// The mechanisms Sluice's SASL listeners offer.
const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];
const PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// The relay's client properties, key to value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientProperties(BTreeMap<String, String>);

impl fmt::Debug for ClientProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .map(|(k, v)| (k, if is_secret(k) { "***" } else { v.as_str() })),
            )
            .finish()
    }
}

/// A property whose value is a secret (a password, a key given inline).
fn is_secret(key: &str) -> bool {
    ["password", "secret", "passphrase", "private.key"]
        .iter()
        .any(|word| key.contains(word))
        || key == "ssl.key.pem"
}

impl ClientProperties {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Sets one property (a later one wins, as on Kafka's command lines). Key and value are
    /// trimmed, as Kafka's clients trim their string and password settings.
    pub fn set(&mut self, key: &str, value: &str) {
        self.0
            .insert(key.trim().to_string(), value.trim().to_string());
    }

    /// `KEY=VALUE`, as `--client-property` takes it.
    pub fn set_assignment(&mut self, assignment: &str) -> Result<(), OutboxError> {
        match assignment.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                self.set(k, v);
                Ok(())
            }
            // Named by what comes before any separator: the rest may be a password.
            _ => Err(OutboxError::Setup(format!(
                "--client-property {:?}: give KEY=VALUE, e.g. security.protocol=SASL_SSL",
                assignment
                    .split(['=', ':', ' ', '\t'])
                    .next()
                    .unwrap_or_default()
            ))),
        }
    }

    /// A properties file, read as Java reads one (`java.util.Properties::load`): `key=value`,
    /// `key: value` or `key value`; `#` and `!` start comments; a backslash escapes the next
    /// character (`\=`, `\:`, `\\`, `\t`, `\n`, `\uXXXX`) and, at the end of a line, joins the
    /// next one. Values are then trimmed, as Kafka's clients trim them. `what` names the file
    /// in messages.
    pub fn read_properties(&mut self, text: &str, what: &str) -> Result<(), OutboxError> {
        let mut lines = text.lines().enumerate();
        while let Some((n, first)) = lines.next() {
            let first = first.trim_start();
            if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
                continue;
            }
            let mut logical = first.to_string();
            while ends_in_continuation(&logical) {
                logical.pop();
                match lines.next() {
                    Some((_, next)) => logical.push_str(next.trim_start()),
                    None => break,
                }
            }
            let (key, value) = split_property(&logical);
            let bad = |why: &str| OutboxError::Setup(format!("{what} line {}: {why}", n + 1));
            let key = unescape(key).ok_or_else(|| bad("a bad \\u escape in the key"))?;
            let value = unescape(value).ok_or_else(|| bad("a bad \\u escape in the value"))?;
            if key.is_empty() {
                return Err(bad("no key"));
            }
            self.set(&key, &value);
        }
        Ok(())
    }

    /// The security protocol asked for, in capitals (PLAINTEXT when not set).
    pub fn protocol(&self) -> String {
        self.get("security.protocol")
            .map_or_else(|| "PLAINTEXT".to_string(), str::to_ascii_uppercase)
    }

    /// The checks made before anything connects; each message names the property.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |what: String| Err(OutboxError::Setup(format!("client property {what}")));
        for key in self.0.keys() {
            let hint = match key.as_str() {
                k if k.starts_with("ssl.truststore.") => Some(
                    "is a Java trust store: give the authority as a PEM file in ssl.ca.location",
                ),
                "sasl.jaas.config" => Some("is Java's: give sasl.username and sasl.password"),
                "security.protocol" | "client.id" => None,
                k if k.starts_with("sasl.") || k.starts_with("ssl.") => None,
                _ => Some(
                    "cannot be set: only security.protocol, sasl.*, ssl.* and client.id may; the \
                     relay sets its clients' other properties itself (its exactly-once delivery \
                     depends on them)",
                ),
            };
            if let Some(hint) = hint {
                return bad(format!("{key} {hint}"));
            }
        }
        if self.get("ssl.endpoint.identification.algorithm") == Some("") {
            // Java's way to turn the host name check off; librdkafka would keep it on.
            return bad(
                "ssl.endpoint.identification.algorithm is empty: give none (or https)".into(),
            );
        }
        let protocol = self.protocol();
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return bad(format!(
                "security.protocol={protocol}: give one of {}",
                PROTOCOLS.join(", ")
            ));
        }
        let sasl = protocol.starts_with("SASL_");
        let tls = protocol.ends_with("SSL");
        if let (Some(one), Some(other)) = (self.get("sasl.mechanism"), self.get("sasl.mechanisms"))
        {
            if !one.eq_ignore_ascii_case(other) {
                return bad(format!(
                    "sasl.mechanism={one} and sasl.mechanisms={other}: they are one setting \
                     (librdkafka takes both names); give one"
                ));
            }
        }
        if !tls {
            if let Some(key) = self.0.keys().find(|k| k.starts_with("ssl.")) {
                return bad(format!(
                    "{key} is set but security.protocol is {protocol}: use SSL or SASL_SSL"
                ));
            }
        }
        let mechanism = self
            .get("sasl.mechanism")
            .or_else(|| self.get("sasl.mechanisms"));
        if sasl {
            let Some(mechanism) = mechanism else {
                return bad(format!(
                    "sasl.mechanism: security.protocol={protocol} needs one ({})",
                    MECHANISMS.join(", ")
                ));
            };
            if !MECHANISMS.contains(&mechanism.to_ascii_uppercase().as_str()) {
                return bad(format!(
                    "sasl.mechanism={mechanism}: Sluice offers {}",
                    MECHANISMS.join(", ")
                ));
            }
            for needed in ["sasl.username", "sasl.password"] {
                if self.get(needed).is_none() {
                    return bad(format!(
                        "{needed}: security.protocol={protocol} with {mechanism} needs it"
                    ));
                }
            }
        } else if let Some(key) = self.0.keys().find(|k| k.starts_with("sasl.")) {
            return bad(format!(
                "{key} is set but security.protocol is {protocol}: use SASL_SSL or \
                 SASL_PLAINTEXT"
            ));
        }
        // librdkafka's own checks: names it does not know, values it refuses, files it cannot
        // read. No bootstrap address, so nothing connects.
        let mut check = ClientConfig::new();
        self.apply(&mut check);
        check.set("log_level", "0");
        check.create::<BaseProducer>().map(drop).map_err(|e| {
            OutboxError::Setup(format!(
                "client properties: librdkafka refused them: {}",
                hide_secrets(&e.to_string(), self)
            ))
        })
    }

    /// Sets the properties on a client's configuration (the mechanism in capitals, which
    /// librdkafka insists on).
    pub fn apply(&self, config: &mut ClientConfig) {
        for (k, v) in &self.0 {
            let v = match k.as_str() {
                "security.protocol" | "sasl.mechanism" | "sasl.mechanisms" => {
                    v.to_ascii_uppercase()
                }
                _ => v.clone(),
            };
            config.set(k, v);
        }
    }
}

/// A line ending in an odd number of backslashes continues on the next.
fn ends_in_continuation(line: &str) -> bool {
    line.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

const BLANKS: [char; 3] = [' ', '\t', '\x0c'];

/// A logical line's key and value, both still escaped: the key ends at the first unescaped
/// `=`, `:` or blank; blanks and then one `=` or `:` separate it from the value.
fn split_property(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || BLANKS.contains(&c) {
            end = i;
            break;
        }
    }
    let rest = line[end..].trim_start_matches(BLANKS);
    let rest = rest
        .strip_prefix(['=', ':'])
        .map_or(rest, |r| r.trim_start_matches(BLANKS));
    (&line[..end], rest)
}

/// Java's escapes undone; None for a malformed `\uXXXX`.
fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)?;
                out.push(char::from_u32(code)?);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Some(out)
}

/// What a client's error callback saw of refused logins (SASL) and TLS handshakes: the first
/// refusal's reason. librdkafka reports a SASL exchange that failed for any reason as an
/// authentication error, and a connection reset during a TLS handshake as an SSL error; those
/// are a broker restarting, not a refusal, and are told apart by their reason (librdkafka's own
/// errors read "Local: ...", a dropped connection "Connection reset", "Disconnected" and the
/// like). librdkafka reports an identical error again only after 30 s, so a refusal is taken
/// from its first report.
#[derive(Debug, Default)]
pub struct LoginRefusals {
    first: Mutex<Option<String>>,
}

impl LoginRefusals {
    /// Notes `error` when it is a refused login or TLS handshake.
    pub fn note(&self, error: &KafkaError, reason: &str) {
        let refused = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::SSL
            )
        );
        if refused && !looks_transient(reason) {
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| reason.to_string());
            }
        }
    }

    /// The first refusal's reason, if there was one.
    pub fn settled(&self) -> Option<String> {
        self.first.lock().ok().and_then(|f| f.clone())
    }
}

/// A reason that names a failed connection rather than an answer.
fn looks_transient(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    [
        "local:",
        "connection reset",
        "disconnected",
        "broken pipe",
        "connection refused",
        "timed out",
        "eof",
    ]
    .iter()
    .any(|word| reason.contains(word))
}

/// `text` with every secret value of `props` replaced by `***`.
pub fn hide_secrets(text: &str, props: &ClientProperties) -> String {
    props
        .0
        .iter()
        .filter(|(k, v)| is_secret(k) && !v.is_empty())
        .fold(text.to_string(), |t, (_, v)| t.replace(v.as_str(), "***"))
}

/// A TOML (or JSON) value of the `[outbox.client]` table: a string, a number or a boolean, or
/// a table of more, whose keys join with dots (`[outbox.client.sasl] username = "relay"` is
/// `sasl.username`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Value {
    Text(String),
    Integer(i64),
    Float(f64),
    Flag(bool),
    Table(BTreeMap<String, Value>),
}

/// Adds `table`'s values to `out` under dotted keys; Err(key) for a key given twice (flat and
/// nested: `"sasl.username"` beside `[sasl] username`).
fn flatten(
    prefix: &str,
    table: BTreeMap<String, Value>,
    out: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k
        } else {
            format!("{prefix}.{k}")
        };
        let value = match v {
            Value::Text(s) => s,
            Value::Integer(n) => n.to_string(),
            Value::Float(n) => n.to_string(),
            Value::Flag(b) => b.to_string(),
            Value::Table(t) => {
                flatten(&key, t, out)?;
                continue;
            }
        };
        if out.insert(key.clone(), value).is_some() {
            return Err(key);
        }
    }
    Ok(())
}

impl<'de> Deserialize<'de> for ClientProperties {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = BTreeMap::<String, Value>::deserialize(d)?;
        let mut out = BTreeMap::new();
        flatten("", table, &mut out).map_err(|key| {
            serde::de::Error::custom(format!("client property {key} is given twice"))
        })?;
        Ok(ClientProperties(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> ClientProperties {
        let mut p = ClientProperties::default();
        for (k, v) in pairs {
            p.set(k, v);
        }
        p
    }

    fn error(p: &ClientProperties) -> String {
        p.validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_scram_login_over_tls_is_taken_and_its_password_never_shown() {
        let p = props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "relay"),
            ("sasl.password", "s3cret-pw"),
        ]);
        assert!(p.validate().is_ok(), "{}", error(&p));
        let shown = format!("{p:?}");
        assert!(
            shown.contains("relay") && !shown.contains("s3cret-pw"),
            "{shown}"
        );
        assert_eq!(
            hide_secrets("login as relay with s3cret-pw failed", &p),
            "login as relay with *** failed"
        );
        let mut c = ClientConfig::new();
        p.apply(&mut c);
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
    }

    #[test]
    fn what_the_relay_sets_itself_or_sluice_lacks_is_refused_by_name() {
        for (pairs, named) in [
            (vec![("enable.idempotence", "false")], "enable.idempotence"),
            (vec![("transactional.id", "x")], "transactional.id"),
            (
                vec![("ssl.truststore.location", "t.jks")],
                "ssl.ca.location",
            ),
            (vec![("security.protocol", "TLS")], "security.protocol=TLS"),
            (vec![("security.protocol", "SASL_SSL")], "sasl.mechanism"),
            (
                vec![
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "GSSAPI"),
                ],
                "Sluice offers",
            ),
            (
                vec![
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.username", "relay"),
                ],
                "sasl.password",
            ),
            (
                vec![("sasl.username", "relay")],
                "security.protocol is PLAINTEXT",
            ),
            (
                vec![("security.protocol", "SSL"), ("ssl.no.such.thing", "1")],
                "ssl.no.such.thing",
            ),
            (
                vec![
                    ("security.protocol", "SSL"),
                    ("ssl.endpoint.identification.algorithm", ""),
                ],
                "give none",
            ),
            (
                vec![("ssl.ca.location", "/ca.pem")],
                "security.protocol is PLAINTEXT: use SSL or SASL_SSL",
            ),
            (
                vec![
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.mechanisms", "OAUTHBEARER"),
                ],
                "they are one setting",
            ),
        ] {
            let e = error(&props(&pairs));
            assert!(e.contains(named), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn a_properties_file_and_nested_toml_tables_give_dotted_keys() {
        let mut p = ClientProperties::default();
        let file = "# the relay's login\nsecurity.protocol=SASL_SSL\n! old comment\n\
                    sasl.mechanism: SCRAM-SHA-256\n\nsasl.username = relay\nsasl.password=a=b\n";
        assert!(p.read_properties(file, "relay.properties").is_ok());
        assert_eq!(p.get("sasl.password"), Some("a=b"));
        assert_eq!(p.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert!(p.validate().is_ok(), "{}", error(&p));
        let e = p
            .read_properties("security.protocol=SSL\n=junk\n", "relay.properties")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("relay.properties line 2: no key"), "{e}");

        let nested: ClientProperties = match serde_json::from_str(
            r#"{"security": {"protocol": "SSL"}, "ssl.ca.location": "/ca.pem",
                "sasl": {"kerberos": {"min": {"time": {"before": {"relogin": 0}}}}}}"#,
        ) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(nested.get("security.protocol"), Some("SSL"));
        assert_eq!(nested.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(
            nested.get("sasl.kerberos.min.time.before.relogin"),
            Some("0")
        );
        let mut assigned = ClientProperties::default();
        assert!(assigned.set_assignment("client.id=relay-1").is_ok());
        assert!(assigned.set_assignment("=x").is_err());
        assert!(assigned.set_assignment("client.id").is_err());
        let e = assigned
            .set_assignment("sasl.password:hunter2")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("sasl.password") && !e.contains("hunter2"), "{e}");

        let twice: Result<ClientProperties, _> =
            serde_json::from_str(r#"{"sasl.username": "a", "sasl": {"username": "b"}}"#);
        let e = twice.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("sasl.username is given twice"), "{e}");
    }

    #[test]
    fn a_properties_file_is_read_as_java_reads_one() {
        let mut p = ClientProperties::default();
        let file = concat!(
            "  # an indented comment\n",
            "sasl.password = p\\=w\\:d\\\\x  \n",
            "ssl.ca.location C:\\\\certs\\\\ca.pem\n",
            "sasl.username=re\\\n",
            "      lay\n",
            "client.id=caf\\u00e9\n",
            "sasl.mechanism:SCRAM-SHA-256\n",
        );
        assert!(p.read_properties(file, "f").is_ok());
        // Escapes undone, blanks trimmed (as Kafka's clients trim them).
        assert_eq!(p.get("sasl.password"), Some("p=w:d\\x"));
        assert_eq!(p.get("ssl.ca.location"), Some("C:\\certs\\ca.pem"));
        assert_eq!(p.get("sasl.username"), Some("relay"));
        assert_eq!(p.get("client.id"), Some("café"));
        assert_eq!(p.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        let e = p
            .read_properties("client.id=\\u00zz\n", "f")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("f line 1"), "{e}");

        // A line ending in an even number of backslashes does not continue; a comment never
        // continues; a blank line ends a continuation; CRLF ends a line as LF does; a
        // continuation at the end of the file ends the value.
        let mut q = ClientProperties::default();
        let file = concat!(
            "ssl.ca.location=C:\\\\\r\n",
            "client.id=not-continued\r\n",
            "# a comment ending in a backslash \\\n",
            "ssl.key.location=/k.pem\n",
            "sasl.username=a\\\n",
            "\n",
            "sasl.password=b\\",
        );
        assert!(q.read_properties(file, "f").is_ok());
        assert_eq!(q.get("ssl.ca.location"), Some("C:\\"));
        assert_eq!(q.get("client.id"), Some("not-continued"));
        assert_eq!(q.get("ssl.key.location"), Some("/k.pem"));
        assert_eq!(q.get("sasl.username"), Some("a"));
        assert_eq!(q.get("sasl.password"), Some("b"));
    }

    #[test]
    fn a_broken_connection_during_a_login_is_not_a_refusal() {
        let refusals = LoginRefusals::default();
        let auth = KafkaError::Global(RDKafkaErrorCode::Authentication);
        let ssl = KafkaError::Global(RDKafkaErrorCode::SSL);
        let down = KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure);
        refusals.note(&down, "Connection refused");
        refusals.note(
            &auth,
            "SASL SCRAM-SHA-512 mechanism handshake failed: Local: Broker transport failure",
        );
        refusals.note(&ssl, "SSL handshake failed: Connection reset by peer");
        assert_eq!(refusals.settled(), None);
        refusals.note(
            &auth,
            "SASL authentication error: Authentication failed during authentication",
        );
        refusals.note(&ssl, "SSL handshake failed: certificate verify failed");
        assert_eq!(
            refusals.settled().as_deref(),
            Some("SASL authentication error: Authentication failed during authentication")
        );
    }
}
