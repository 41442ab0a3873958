//! Any bytes a client can send in SaslAuthenticate, for each mechanism: the PLAIN parser and
//! both SCRAM steps (the second after a well-formed first) answer or refuse, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_auth::{ScramCredential, ScramMechanism, ScramServer};

fuzz_target!(|data: &[u8]| {
    let _ = sluice_auth::parse_plain(data);
    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let credential = ScramCredential::from_password(m, "pw", b"salt", 4096);
        let lookup = |user: &str| (user == "u").then(|| credential.clone());
        let _ = ScramServer::new(m, "server-nonce".into()).step(data, &lookup);
        let mut server = ScramServer::new(m, "server-nonce".into());
        if server.step(b"n,,n=u,r=client", &lookup).is_ok() {
            let _ = server.step(data, &lookup);
        }
    }
});
