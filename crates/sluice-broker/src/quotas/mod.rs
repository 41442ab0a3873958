//! Client quotas (KIP-13, KIP-55, KIP-124, KIP-546): limits per user and/or client id, set
//! with AlterClientQuotas (`kafka-configs.sh --entity-type users|clients`), enforced on
//! produce and fetch bytes per second and on the time requests hold the broker's threads
//! (`request_percentage`, request_time.rs). A client over its rate is answered at once with
//! `throttle_time_ms` and its connection is muted for that long (KIP-219), so one noisy
//! client cannot take the broker from the others. `ip` entities hold one address to a
//! `connection_creation_rate` (KIP-612), which the listeners apply when they accept
//! (`Service::connection_creation_rate`, `sluice_wire::admission`).
//!
//! ```text
//!  AlterClientQuotas ─▶ store::alter (quotas.json | metadata log) ─▶ ClientQuotas
//!  Produce/Fetch ─▶ ClientQuotas::lookup(user, client id) ─▶ throttle::Buckets::take(bytes)
//!                ─▶ throttle_time_ms in the response + Session::mute_until
//!  any request ─▶ request_time: ns on a thread ─▶ Buckets::take(ns) ─▶ the same
//! ```

pub mod request_time;
pub mod store;
pub mod throttle;
