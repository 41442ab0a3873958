//! Cluster metadata: the records of the metadata log ([`records`]) and the state every node
//! builds by applying them in order ([`state`]).

pub mod quotas;
pub mod records;
pub mod state;

pub use quotas::{ClientQuota, ClientQuotas, EntityName, QuotaEntity, QuotaValue, QuotaValues};
pub use records::{ListenerEndpoint, MetadataRecord, NodeRegistration, PartitionChange};
pub use state::{ApplyError, ClusterState, NodeInfo, PartitionInfo, TopicInfo};
