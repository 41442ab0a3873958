//! The request-time quota (`request_percentage`, KIP-124): how much of the broker's threads a
//! user or client id may hold, as a percentage of one thread (200 = two threads' worth). A
//! request's time is what its handler spends on a thread: the synchronous part of its
//! dispatch plus every poll of its pending answer, read on the monotonic clock around them —
//! not the time it waits for an fsync, a quorum or a long poll, as Kafka counts time on its
//! request handler threads and not in purgatory. Over the quota, the answer carries
//! `throttle_time_ms` (the larger of this and a byte-rate throttle) and the connection is
//! muted for that long, as for the byte rates (KIP-219). The server's time decoding the
//! request and encoding its answer (part of Kafka's network thread time) is recorded too,
//! once known, without throttling that answer (`Broker::codec_meter`): the next answer
//! carries the debt.
//!
//! Exempt: the requests a client needs to connect and log in (ApiVersions, SaslHandshake,
//! SaslAuthenticate), so that a throttled client can always reconnect, and the cluster's own
//! traffic (a follower's Fetch, WriteTxnMarkers), which cannot be slowed without slowing
//! every client. A Fetch naming a replica id is taken at its word here; one that is not a
//! follower's is refused by the authorizer or answered with an error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use sluice_log::Stopwatch;
use sluice_wire::{PendingResponse, Reply};

use crate::security::Session;

use crate::broker::Broker;
use crate::handlers::{self, Call};
use crate::quotas::throttle::QuotaKind;

impl Broker {
    /// Hands the request to its handler; under a request-time quota, counts the time it
    /// holds a thread against the quota and throttles the answer when that is over it, and
    /// returns with the reply the meter of the server's codec time on the request (see
    /// [`sluice_wire::Service::call_metered`]) under the same quota.
    pub(crate) fn dispatch_metered(
        &self,
        api: ApiKey,
        body: RequestKind,
        call: &Call,
        received: Option<std::time::Instant>,
    ) -> (Reply, Option<sluice_wire::CodecMeter>) {
        let user = if exempt(api, &body) {
            None
        } else {
            self.request_quota_of(call.session, call.client_id)
        };
        let Some(user) = user else {
            return (handlers::dispatch(self, api, body, call), None);
        };
        // The decoding, up to here (this quota lookup with it, a few microseconds at most).
        let decoding = received.map_or(std::time::Duration::ZERO, |r| r.elapsed());
        let watch = Stopwatch::start();
        let reply = handlers::dispatch(self, api, body, call);
        let spent = watch.elapsed_ns();
        let client_id = call.client_id.to_string();
        let meter = self.codec_meter(user.clone(), client_id.clone(), decoding);
        (self.charged(reply, spent, user, client_id, call), meter)
    }

    /// `reply` with its handler's time charged: its throttle written into the answer (once
    /// there is one) and the connection muted for it.
    fn charged(
        &self,
        reply: Reply,
        spent: u64,
        user: String,
        client_id: String,
        call: &Call,
    ) -> Reply {
        let mute = call.session.mute_handle();
        match reply {
            Reply::Ready(mut response) => {
                let ms = self.throttle(&user, &client_id, &mute, QuotaKind::Request, spent);
                set_throttle_time(&mut response, ms);
                Reply::Ready(response)
            }
            Reply::Later(pending) => {
                let Some(broker) = self.arc() else {
                    // Shutting down: nothing left to protect.
                    return Reply::Later(pending);
                };
                Reply::Later(Box::pin(Metered {
                    pending,
                    spent,
                    charge: Some(Box::new(move |spent| {
                        broker.throttle(&user, &client_id, &mute, QuotaKind::Request, spent)
                    })),
                }))
            }
            Reply::Silent => {
                // acks=0: nobody to tell, but the connection is still muted.
                self.throttle(&user, &client_id, &mute, QuotaKind::Request, spent);
                Reply::Silent
            }
            close @ Reply::Close(_) => close,
        }
    }

    /// The user a session's requests are charged to, when it or `client_id` has a
    /// `request_percentage` (one look at the quotas; none at all without quotas).
    fn request_quota_of(&self, session: &Session, client_id: &str) -> Option<String> {
        let quotas = self.client_quotas();
        if !quotas.has_client_entities() {
            return None;
        }
        let user = session.principal().map(|p| p.name).unwrap_or_default();
        quotas
            .lookup(&user, client_id, QuotaKind::Request.key())
            .is_some()
            .then_some(user)
    }

    /// The server's own time on a request (decoding it, encoding its answer) charged to the
    /// same quota once known. Recorded, not throttled: the answer's `throttle_time_ms` is
    /// already written, so, as Kafka records its network threads' time, the debt shows in
    /// the throttle of the requests that follow.
    fn codec_meter(
        &self,
        user: String,
        client_id: String,
        decoding: std::time::Duration,
    ) -> Option<sluice_wire::CodecMeter> {
        let broker = self.arc()?;
        Some(Box::new(move |encoding| {
            let ns = u64::try_from((decoding + encoding).as_nanos()).unwrap_or(u64::MAX);
            broker.record_quota_use(&user, &client_id, QuotaKind::Request, ns);
        }))
    }
}

/// Requests the request-time quota does not count (see the module's header).
fn exempt(api: ApiKey, body: &RequestKind) -> bool {
    match body {
        RequestKind::Fetch(f) => f.replica_id.0 >= 0 || f.replica_state.replica_id.0 >= 0,
        _ => matches!(
            api,
            ApiKey::ApiVersions
                | ApiKey::SaslHandshake
                | ApiKey::SaslAuthenticate
                | ApiKey::WriteTxnMarkers
        ),
    }
}

/// A pending answer whose polls are timed; once it is ready, the time is charged and the
/// throttle written into it. One dropped before it is ready (the client went away) is
/// charged for what it spent all the same.
struct Metered {
    pending: PendingResponse,
    spent: u64,
    charge: Option<Box<dyn FnOnce(u64) -> i32 + Send>>,
}

impl Future for Metered {
    type Output = Option<ResponseKind>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let watch = Stopwatch::start();
        let polled = this.pending.as_mut().poll(cx);
        this.spent = this.spent.saturating_add(watch.elapsed_ns());
        let Poll::Ready(mut response) = polled else {
            return Poll::Pending;
        };
        if let Some(charge) = this.charge.take() {
            let ms = charge(this.spent);
            if let Some(r) = response.as_mut() {
                set_throttle_time(r, ms);
            }
        }
        Poll::Ready(response)
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if let Some(charge) = self.charge.take() {
            charge(self.spent);
        }
    }
}

/// Raises the answer's `throttle_time_ms` to `ms` (answers without the field keep none; a
/// version without it does not encode it).
pub(crate) fn set_throttle_time(response: &mut ResponseKind, ms: i32) {
    if ms <= 0 {
        return;
    }
    macro_rules! raise {
        ($($api:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$api(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    raise!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        ElectLeaders,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        IncrementalAlterConfigs,
        DescribeCluster,
        DescribeLogDirs,
        InitProducerId,
        FindCoordinator,
        JoinGroup,
        SyncGroup,
        Heartbeat,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        LeaveGroup,
        OffsetCommit,
        OffsetFetch,
        OffsetForLeaderEpoch,
        DescribeGroups,
        ListGroups,
        DeleteGroups,
        OffsetDelete,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        UnregisterBroker,
        AddRaftVoter,
        RemoveRaftVoter,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas,
        AlterClientQuotas,
        CreateAcls,
        DescribeAcls,
        DeleteAcls,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{BrokerId, FetchRequest, MetadataResponse, ProduceRequest};

    #[test]
    fn connecting_logging_in_and_replication_are_exempt() {
        let fetch = |replica: i32| {
            RequestKind::Fetch(FetchRequest::default().with_replica_id(BrokerId(replica)))
        };
        assert!(exempt(ApiKey::Fetch, &fetch(2)));
        assert!(!exempt(ApiKey::Fetch, &fetch(-1)));
        let mut follower = FetchRequest::default().with_replica_id(BrokerId(-1));
        follower.replica_state.replica_id = BrokerId(3);
        assert!(exempt(ApiKey::Fetch, &RequestKind::Fetch(follower)));
        let produce = RequestKind::Produce(ProduceRequest::default());
        assert!(!exempt(ApiKey::Produce, &produce));
        assert!(exempt(ApiKey::ApiVersions, &produce));
        assert!(exempt(ApiKey::SaslAuthenticate, &produce));
    }

    /// The server's codec time on a request is recorded against its request quota without
    /// throttling that request; the next answer carries the debt and the connection is
    /// muted then. Exempt requests and clients without a quota carry no meter. Through the
    /// broker's `Service` implementation, as the connection loop calls it.
    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // the frame's arrival, as the connection loop reads it
    async fn codec_time_is_charged_to_the_request_quota() {
        let received = std::time::Instant::now;
        use kafka_protocol::messages::MetadataRequest;
        use sluice_cluster::metadata::quotas::{EntityName, QuotaEntity, QuotaValue};
        use sluice_wire::{Request, Service};
        let (_dir, broker) = crate::test_support::broker_with_records("t", 0);
        let entity = QuotaEntity {
            user: None,
            client_id: Some(EntityName::Named("noisy".into())),
            ip: None,
        };
        // 10% of a thread: a 100 ms burst, far more than a Metadata call takes even in a
        // debug build on a loaded machine.
        let set = [("request_percentage".to_string(), QuotaValue(10.0))].into();
        broker
            .alter_client_quota(entity, set, Vec::new())
            .await
            .expect("quota set");
        let peer = sluice_wire::Peer {
            addr: "127.0.0.1:5000".parse().expect("an address"),
            listener: std::sync::Arc::from("PLAINTEXT"),
            tls: false,
            client_certificate: None,
        };
        let session = Session::open(&peer, &broker.config().security);
        let request = |api: ApiKey, client: &str| Request {
            header: kafka_protocol::messages::RequestHeader::default()
                .with_request_api_key(api as i16)
                .with_request_api_version(12)
                .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_string(
                    client.to_string(),
                ))),
            api_key: api,
            body: RequestKind::Metadata(MetadataRequest::default()),
        };
        let throttle = |reply: Reply| match reply {
            Reply::Ready(r) => match *r {
                ResponseKind::Metadata(m) => m.throttle_time_ms,
                other => panic!("not a Metadata answer: {other:?}"),
            },
            _ => panic!("Metadata is answered at once"),
        };
        let (_, meter) = broker.call_metered(
            request(ApiKey::Metadata, "quiet"),
            &peer,
            &session,
            received(),
        );
        assert!(meter.is_none(), "no quota, no meter");
        let (_, meter) = broker.call_metered(
            request(ApiKey::ApiVersions, "noisy"),
            &peer,
            &session,
            received(),
        );
        assert!(meter.is_none(), "ApiVersions is exempt");

        let (reply, meter) = broker.call_metered(
            request(ApiKey::Metadata, "noisy"),
            &peer,
            &session,
            received(),
        );
        assert_eq!(throttle(reply), 0, "within the quota so far");
        let meter = meter.expect("a meter for a client with a request quota");
        let now = || broker.clock.now_ms();
        // Five seconds of a 10% quota: far over it, recorded without muting.
        meter(std::time::Duration::from_secs(5));
        assert_eq!(session.muted_for(now), None);
        let (reply, _) = broker.call_metered(
            request(ApiKey::Metadata, "noisy"),
            &peer,
            &session,
            received(),
        );
        assert!(throttle(reply) > 0, "the next answer carries the debt");
        assert!(
            session.muted_for(now).is_some(),
            "and the connection is muted"
        );
    }

    #[test]
    fn the_throttle_is_raised_never_lowered() {
        let mut r = ResponseKind::Metadata(MetadataResponse::default().with_throttle_time_ms(50));
        set_throttle_time(&mut r, 20);
        set_throttle_time(&mut r, 0);
        let ResponseKind::Metadata(m) = &r else {
            panic!("not metadata")
        };
        assert_eq!(m.throttle_time_ms, 50);
        set_throttle_time(&mut r, 80);
        let ResponseKind::Metadata(m) = &r else {
            panic!("not metadata")
        };
        assert_eq!(m.throttle_time_ms, 80);
    }
}
