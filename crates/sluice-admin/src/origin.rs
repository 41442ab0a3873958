//! Requests a web page made a browser send. Two checks, before any login:
//!
//! - **DNS rebinding.** An open admin port (no token, no authorizer: it listens on loopback
//!   only) answers anyone on the machine. A web page can still reach it: its own host name,
//!   resolved again to 127.0.0.1 after the page loaded, makes the browser treat the port as
//!   the page's own origin, so the page may read the answers and send any request. The
//!   browser sends that host name in `Host`, so an open port answers only a `Host` that is an
//!   IP address, `localhost` (or a name under `.localhost`), or this machine's own host name
//!   (which a page cannot make the browser resolve elsewhere); anything else gets 403. A port
//!   with a token or logins needs no such check: the page does not have the credentials.
//! - **Cross-site requests.** A page may send a form or a plain-text POST to any origin
//!   without asking, and the browser attaches HTTP basic credentials it has cached for that
//!   origin. So a request that changes something (any method but GET, HEAD and OPTIONS) whose
//!   `Origin` names another origin than `Host` gets 403, unless it carries a bearer token
//!   (which a browser never attaches by itself). Clients that are not browsers send no
//!   `Origin`, and the console's own requests name its origin. Behind a reverse proxy the
//!   origin it names in `X-Forwarded-Host` (and `X-Forwarded-Proto`), or in the standard
//!   `Forwarded` header's `host` (and `proto`), counts as the port's own:
//!   a page cannot add those headers to a request the browser sends without asking first
//!   (and the port answers no CORS preflight).

use axum::http::{header, HeaderMap, Method, StatusCode};

use crate::error::ApiError;

/// The names an open port answers to besides IP addresses and `localhost`.
#[derive(Debug, Clone, Default)]
pub struct LocalNames {
    names: Vec<String>,
}

impl LocalNames {
    /// This machine's host name (from the kernel), and its first label.
    pub fn of_this_machine() -> LocalNames {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        LocalNames::with(name.trim())
    }

    pub fn with(host_name: &str) -> LocalNames {
        let full = normalized(host_name);
        let mut names = Vec::new();
        if !full.is_empty() {
            if let Some((short, _)) = full.split_once('.') {
                names.push(short.to_string());
            }
            names.push(full);
        }
        LocalNames { names }
    }

    /// Whether a `Host` header (`name`, `name:port`, `[v6]:port`) names this machine in a way
    /// no web page can redirect.
    pub fn trusts(&self, host: &str) -> bool {
        let name = normalized(split_authority(host).0);
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.names.contains(&name)
    }
}

fn normalized(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// A `Host` header's or an origin's host (an IPv6 address without its brackets) and port, if
/// it names one.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    let is_port = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':').filter(|p| is_port(p))),
            None => (rest, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if is_port(port) => (host, Some(port)),
        _ => (authority, None),
    }
}

/// Host and port of `authority`, the scheme's default port filled in, for comparing.
fn endpoint(scheme: &str, authority: &str) -> (String, u16) {
    let (host, port) = split_authority(authority.trim());
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    (
        normalized(host),
        port.and_then(|p| p.parse().ok()).unwrap_or(default),
    )
}

/// The first value of a comma-separated header, trimmed (empty if the header is).
fn first_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?;
    value.split(',').next().map(str::trim)
}

/// The origin (scheme, authority) named by `X-Forwarded-Host` and `X-Forwarded-Proto`. An
/// empty host names none; an empty proto names a scheme no origin has.
fn x_forwarded(headers: &HeaderMap, own_scheme: &str) -> Option<(String, String)> {
    let host = first_value(headers, "x-forwarded-host").filter(|h| !h.is_empty())?;
    let scheme = if headers.contains_key("x-forwarded-proto") {
        first_value(headers, "x-forwarded-proto").unwrap_or("")
    } else {
        own_scheme
    };
    Some((scheme.to_string(), host.to_string()))
}

/// The origin named by the standard `Forwarded` header (RFC 7239) of the proxy nearest the
/// client: its first element's `host` and `proto` parameters. Values may be quoted strings
/// (which may hold `,`, `;` and backslash escapes). A malformed element, a parameter given
/// twice (RFC 7239 section 4) or an empty host names no origin; an empty proto names a
/// scheme no origin has.
fn forwarded(headers: &HeaderMap, own_scheme: &str) -> Option<(String, String)> {
    let value = headers.get("forwarded")?.to_str().ok()?;
    let (mut host, mut proto) = (None, None);
    for (name, value) in first_forwarded_element(value)? {
        let slot = match name.as_str() {
            "host" => &mut host,
            "proto" => &mut proto,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let host = host.filter(|h| !h.is_empty())?;
    Some((proto.unwrap_or_else(|| own_scheme.to_string()), host))
}

/// The `name=value` pairs of a `Forwarded` header's first element: names lower-cased,
/// quoted values unquoted. `None` if it is malformed (a pair without `=`, an unclosed quote).
fn first_forwarded_element(header: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = header.chars();
    loop {
        let mut name = String::new();
        let mut value = String::new();
        let mut in_value = false;
        let mut end_of_element = true;
        while let Some(c) = chars.next() {
            match c {
                '"' if in_value => loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => value.push(chars.next()?),
                        other => value.push(other),
                    }
                },
                '=' if !in_value => in_value = true,
                ';' => {
                    end_of_element = false;
                    break;
                }
                ',' => break,
                c if in_value => value.push(c),
                c => name.push(c),
            }
        }
        let name = name.trim().to_ascii_lowercase();
        if !name.is_empty() || in_value {
            if !in_value || name.is_empty() {
                return None;
            }
            pairs.push((name, value.trim().to_string()));
        }
        if end_of_element {
            return Some(pairs);
        }
    }
}

/// The refusal for a request a web page may have made, if it is one (see the module).
/// `open`: the port takes requests without a login. `tls`: it speaks HTTPS.
pub fn refusal(
    method: &Method,
    headers: &HeaderMap,
    open: bool,
    tls: bool,
    names: &LocalNames,
) -> Option<ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if open {
        match host {
            Some(host) if names.trusts(host) => {}
            Some(host) => {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host '{host}' refused: an admin port without a token answers only \
                         localhost, IP addresses and this machine's name (a web page could \
                         otherwise reach it through its own name; set an admin token to use \
                         other names)"
                    ),
                ))
            }
            // HTTP/1.0 without Host: not a browser.
            None => {}
        }
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "));
    let origin = headers.get(header::ORIGIN)?;
    if bearer {
        return None;
    }
    let origin = origin.to_str().unwrap_or("null");
    let own_scheme = if tls { "https" } else { "http" };
    // The port itself, and the origins a reverse proxy in front of it says it serves (a page
    // cannot add these headers to a request it may send without asking).
    let own = host.map(|host| (own_scheme.to_string(), host.to_string()));
    let same = origin.split_once("://").is_some_and(|(scheme, authority)| {
        own.into_iter()
            .chain(x_forwarded(headers, own_scheme))
            .chain(forwarded(headers, own_scheme))
            .any(|(own_scheme, own_authority)| {
                scheme.eq_ignore_ascii_case(&own_scheme)
                    && endpoint(scheme, authority) == endpoint(&own_scheme, &own_authority)
            })
    });
    (!same).then(|| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "cross-site request refused: Origin '{origin}' is not this admin port ({own_scheme}://{})",
                host.unwrap_or("?")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, Method};

    use super::{refusal, LocalNames};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn an_open_port_answers_local_names_only() {
        let names = LocalNames::with("bank-host-7.example.net");
        for host in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "localhost:8080",
            "LOCALHOST.",
            "console.localhost:8080",
            "bank-host-7:8080",
            "bank-host-7.example.net:8080",
            "10.0.0.5:8080",
        ] {
            assert!(names.trusts(host), "{host}");
        }
        for host in [
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example:8080",
            "bank-host-7.attacker.example",
        ] {
            assert!(!names.trusts(host), "{host}");
        }
        let get = Method::GET;
        let rebound = headers(&[("host", "attacker.example:8080")]);
        assert!(refusal(&get, &rebound, true, false, &names).is_some());
        // With a login required the page has no credentials: not checked.
        assert!(refusal(&get, &rebound, false, false, &names).is_none());
        let local = headers(&[("host", "127.0.0.1:8080")]);
        assert!(refusal(&get, &local, true, false, &names).is_none());
    }

    #[test]
    fn a_change_from_another_origin_is_refused_unless_it_carries_a_bearer_token() {
        let names = LocalNames::default();
        let post = Method::POST;
        let cross = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://attacker.example"),
        ]);
        let error = refusal(&post, &cross, true, false, &names).expect("refused");
        assert!(
            error.message.contains("attacker.example"),
            "{}",
            error.message
        );
        // Also where logins are needed: a browser attaches cached basic credentials.
        assert!(refusal(&Method::DELETE, &cross, false, false, &names).is_some());
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(refusal(&post, &null, false, false, &names).is_some());
        let other_port = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:3000"),
        ]);
        assert!(refusal(&post, &other_port, true, false, &names).is_some());
        let other_scheme = headers(&[
            ("host", "127.0.0.1:8443"),
            ("origin", "http://127.0.0.1:8443"),
        ]);
        assert!(refusal(&post, &other_scheme, false, true, &names).is_some());
        // Reading is not refused for its origin (the browser keeps the answer from the page).
        assert!(refusal(&Method::GET, &cross, true, false, &names).is_none());
        let bearer = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://attacker.example"),
            ("authorization", "Bearer t"),
        ]);
        assert!(refusal(&post, &bearer, false, false, &names).is_none());
    }

    #[test]
    fn the_consoles_own_requests_and_non_browser_clients_pass() {
        let names = LocalNames::default();
        let post = Method::POST;
        for (host, origin, tls) in [
            ("127.0.0.1:8080", "http://127.0.0.1:8080", false),
            ("localhost", "http://localhost:80", false),
            ("LocalHost:8080", "http://localhost:8080", false),
            ("[::1]:8443", "https://[::1]:8443", true),
            ("127.0.0.1", "https://127.0.0.1", true),
        ] {
            let mut map = HeaderMap::new();
            map.insert("host", HeaderValue::from_str(host).unwrap());
            map.insert("origin", HeaderValue::from_str(origin).unwrap());
            assert!(
                refusal(&post, &map, true, tls, &names).is_none(),
                "{host} {origin}"
            );
        }
        let cli = headers(&[("host", "127.0.0.1:8080")]);
        assert!(refusal(&post, &cli, true, false, &names).is_none());
    }

    /// Behind a reverse proxy that ends TLS: the browser names the proxy's origin, the proxy
    /// says which one it serves.
    #[test]
    fn a_reverse_proxys_forwarded_origin_counts() {
        let names = LocalNames::default();
        let post = Method::POST;
        let proxied = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://console.bank.example"),
            ("x-forwarded-host", "console.bank.example"),
            ("x-forwarded-proto", "https"),
        ]);
        assert!(refusal(&post, &proxied, false, false, &names).is_none());
        let other = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://attacker.example"),
            ("x-forwarded-host", "console.bank.example"),
            ("x-forwarded-proto", "https"),
        ]);
        assert!(refusal(&post, &other, false, false, &names).is_some());
        let wrong_scheme = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://console.bank.example"),
            ("x-forwarded-host", "console.bank.example"),
        ]);
        assert!(refusal(&post, &wrong_scheme, false, false, &names).is_some());
        // RFC 7239: the first (nearest the client) element's host and proto.
        let standard = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://console.bank.example"),
            (
                "forwarded",
                "for=192.0.2.60;Proto=https;host=\"console.bank.example\", for=10.0.0.1;host=inner",
            ),
        ]);
        assert!(refusal(&post, &standard, false, false, &names).is_none());
        let standard_other = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://attacker.example"),
            (
                "forwarded",
                "for=192.0.2.60;proto=https;host=console.bank.example",
            ),
        ]);
        assert!(refusal(&post, &standard_other, false, false, &names).is_some());
        let standard_no_proto = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://console.bank.example"),
            ("forwarded", "host=console.bank.example"),
        ]);
        assert!(refusal(&post, &standard_no_proto, false, false, &names).is_some());
        let post_with = |pairs: &[(&'static str, &'static str)]| {
            let mut all = vec![
                ("host", "127.0.0.1:8080"),
                ("origin", "https://console.bank.example"),
            ];
            all.extend_from_slice(pairs);
            refusal(&post, &headers(&all), false, false, &names).is_none()
        };
        // A quoted value may hold ';' and ',': it is one value, not more pairs.
        assert!(!post_with(&[(
            "forwarded",
            "for=\"x;host=console.bank.example;proto=https\""
        )]));
        assert!(post_with(&[(
            "forwarded",
            "for=\"[2001:db8::1]:4711\";proto=https;host=\"console.bank.\\example\""
        )]));
        // A parameter given twice, an empty host, an empty proto, a malformed pair: no origin.
        assert!(!post_with(&[(
            "forwarded",
            "host=console.bank.example;host=other;proto=https"
        )]));
        assert!(!post_with(&[("forwarded", "host=;proto=https")]));
        assert!(!post_with(&[(
            "forwarded",
            "host=console.bank.example;proto="
        )]));
        assert!(!post_with(&[(
            "forwarded",
            "proto=https;host=console.bank.example;junk"
        )]));
        assert!(!post_with(&[(
            "forwarded",
            "proto=https;host=\"console.bank.example"
        )]));
        // The same rules for X-Forwarded-*: an empty proto is no scheme, an empty host no origin.
        assert!(!post_with(&[
            ("x-forwarded-host", "console.bank.example"),
            ("x-forwarded-proto", " ")
        ]));
        assert!(!post_with(&[
            ("x-forwarded-host", ""),
            ("x-forwarded-proto", "https")
        ]));
        assert!(post_with(&[
            ("x-forwarded-host", " console.bank.example , inner"),
            ("x-forwarded-proto", "https,http")
        ]));
    }
}
