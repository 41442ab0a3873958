//! Authorization in Kafka's ACL model, without I/O: the broker keeps an [`AclSet`] (from its
//! metadata store or log) and asks it one question per resource a request touches.
//!
//! ```text
//!  CreateAcls  ─▶ AclBinding::validate ─▶ AclSet::add
//!  DeleteAcls  ─▶ AclFilter::from_codes ─▶ AclSet::matching ─▶ AclSet::remove
//!  DescribeAcls ─▶ AclFilter ─▶ AclSet::matching
//!  any request ─▶ AclSet::allows(principal@host, operation, resource)
//! ```

pub mod binding;
pub mod filter;
pub mod set;

pub use binding::{
    canonical_host, validate_principal, AclBinding, Operation, PatternType, Permission,
    ResourceType, CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL,
};
pub use filter::{AclFilter, PatternFilter};
pub use set::{AclSet, Requester};
