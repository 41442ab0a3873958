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
    ranges: Vec<ApiRange>,
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
        ApiTable { ranges }
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
