#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The log crate's integration tests, in one test binary: each file linked on its own cost CI a
//! link of the whole dependency tree (docs/decisions/ci-one-build.md).

mod transactions;
mod whole_log;
