//! The consumer protocol's bytes that ride inside group requests: what a group leader assigned
//! to each member, as the broker and the admin tools read it.

use bytes::Bytes;
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

/// The (topic, partitions) of a consumer-protocol assignment (a version, then the body);
/// empty when the bytes are not one (another protocol type, or damaged).
pub fn decode_assignment(bytes: &Bytes) -> Vec<(String, Vec<i32>)> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]).clamp(0, 3);
    let mut body = bytes.slice(2..);
    ConsumerProtocolAssignment::decode(&mut body, version)
        .map(|a| {
            a.assigned_partitions
                .iter()
                .map(|t| (t.topic.to_string(), t.partitions.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Encodes an assignment as the consumer protocol's bytes (version 0), as a group of the new
/// protocol (KIP-848) is shown to DescribeGroups.
pub fn encode_assignment(assignment: &[(String, Vec<i32>)]) -> Bytes {
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let message = ConsumerProtocolAssignment::default().with_assigned_partitions(
        assignment
            .iter()
            .map(|(topic, partitions)| {
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(partitions.clone())
            })
            .collect(),
    );
    let mut buf = bytes::BytesMut::new();
    buf.extend_from_slice(&0i16.to_be_bytes());
    // Encoding a well-formed message into memory cannot fail; an empty answer if it did.
    if message.encode(&mut buf, 0).is_err() {
        return Bytes::new();
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_a_consumer_sends_and_nothing_from_garbage() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![0, 2]),
        ]);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&1i16.to_be_bytes());
        assignment.encode(&mut buf, 1).unwrap();
        assert_eq!(
            decode_assignment(&buf.freeze()),
            vec![("orders".to_string(), vec![0, 2])]
        );
        assert!(decode_assignment(&Bytes::from_static(b"\x00")).is_empty());
        let round = vec![("a".to_string(), vec![1, 5]), ("b".to_string(), vec![0])];
        assert_eq!(decode_assignment(&encode_assignment(&round)), round);
        assert!(decode_assignment(&Bytes::from_static(b"\x00\x01\xff\xff\xff")).is_empty());
    }
}
