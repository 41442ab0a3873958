//! The table of API versions a service implements; ApiVersions advertises exactly this.

use kafka_protocol::messages::ApiKey;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

#[derive(Debug, Clone)]
pub struct ApiTable {
    /// The versions served (decoded and handled).
    ranges: Vec<ApiRange>,
    /// APIs advertised from a lower version than served (see [`ApiTable::advertise_from`]).
    advertised_min: Vec<(ApiKey, i16)>,
}

impl ApiTable {
    /// A table of the given ranges; each must lie within what the codec can decode.
    pub fn new(ranges: Vec<ApiRange>) -> Self {
        for r in &ranges {
            let codec = r.key.valid_versions();
            assert!(
                r.min <= r.max && r.min >= codec.min && r.max <= codec.max,
                "{:?} {}..{} is outside the codec's {}",
                r.key,
                r.min,
                r.max,
                codec
            );
        }
        ApiTable {
            ranges,
            advertised_min: Vec::new(),
        }
    }

    /// Advertises `key` from `min`, below the versions served: requests of those versions are
    /// refused (the connection is closed, as for any version not served). Apache Kafka 4 does
    /// this for Produce (0–2 listed, refused; KAFKA-18659) because librdkafka before 2.11
    /// compresses with gzip, snappy and lz4 only if a broker lists Produce v0.
    pub fn advertise_from(mut self, key: ApiKey, min: i16) -> Self {
        if self.get(key).is_some_and(|r| min < r.min) {
            self.advertised_min.push((key, min));
        }
        self
    }

    /// The ranges ApiVersions lists.
    pub fn advertised(&self) -> impl Iterator<Item = ApiRange> + '_ {
        self.ranges.iter().map(|r| {
            let min = self
                .advertised_min
                .iter()
                .find(|(k, _)| *k == r.key)
                .map_or(r.min, |(_, m)| *m);
            ApiRange { min, ..*r }
        })
    }

    pub fn get(&self, key: ApiKey) -> Option<ApiRange> {
        self.ranges.iter().find(|r| r.key == key).copied()
    }

    pub fn supports(&self, key: ApiKey, version: i16) -> bool {
        self.get(key)
            .is_some_and(|r| (r.min..=r.max).contains(&version))
    }

    pub fn ranges(&self) -> &[ApiRange] {
        &self.ranges
    }
}
