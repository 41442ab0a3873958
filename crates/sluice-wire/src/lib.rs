//! `sluice-wire`: the Kafka protocol at the edge of the broker.
//!
//! [`frame`] splits the byte stream into size-prefixed frames, [`codec`] turns frames into typed
//! requests and responses with the `kafka-protocol` crate (no I/O), and [`server`] runs the
//! accept loop and per-connection pipelining for any [`server::Service`]. Nothing here knows
//! about storage.

pub mod admission;
pub mod codec;
pub mod consumer_protocol;
pub mod frame;
mod frames;
pub mod server;
pub mod versions;

pub use admission::ConnectionQuotas;
pub use codec::{decode_request, encode_response, DecodeError, Request};
pub use kafka_protocol;
pub use server::{
    serve, CodecMeter, Endpoint, Limits, Peer, PendingResponse, PendingToken, Reply, Service,
    TlsAcceptorCell,
};
pub use tokio_rustls::rustls;
pub use versions::{ApiRange, ApiTable};

// Unit tests decode hostile frames; run them under the allocator the broker uses.
#[cfg(test)]
#[global_allocator]
static ALLOC: sluice_alloc::GuardedAlloc = sluice_alloc::GuardedAlloc;
