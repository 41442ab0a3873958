//! SaslHandshake (KIP-43): the client names the SASL mechanism of the exchange that follows:
//! after v1 in SaslAuthenticate requests, after v0 as bare size-prefixed tokens (what
//! kafka-python 2.0.2 and other clients without SaslAuthenticate send; `Broker::sasl_token`).
//! UNSUPPORTED_SASL_MECHANISM (with the enabled list) for a mechanism not enabled;
//! ILLEGAL_SASL_STATE on a listener without SASL or in the middle of an exchange. Also the
//! first step of a re-authentication (KIP-368) on an authenticated connection.

use kafka_protocol::messages::{ResponseKind, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::ResponseError;
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::session::HandshakeRefusal;

pub const VERSIONS: Versions = Versions::new(0, 1);

pub fn handle(broker: &Broker, request: SaslHandshakeRequest, call: &Call) -> Reply {
    let enabled = &broker.config().security.sasl_mechanisms;
    let error = match call
        .session
        .handshake(&request.mechanism, enabled, call.version == 0)
    {
        Ok(()) => None,
        Err(HandshakeRefusal::Unsupported) => Some(ResponseError::UnsupportedSaslMechanism),
        Err(HandshakeRefusal::IllegalState(reason)) => {
            tracing::info!(peer = %call.peer.addr, %reason, "SaslHandshake refused");
            Some(ResponseError::IllegalSaslState)
        }
    };
    ResponseKind::SaslHandshake(
        SaslHandshakeResponse::default()
            .with_error_code(error.map_or(0, |e| e.code()))
            .with_mechanisms(enabled.iter().map(|m| str_bytes(m.name())).collect()),
    )
    .into()
}
