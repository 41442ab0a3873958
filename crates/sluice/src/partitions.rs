//! Which partitions of a topic a CLI command works on.

use anyhow::bail;
use sluice_client::Client;

/// The partitions named with `--partition`, each checked to exist, or every partition of the
/// topic when none is named.
pub async fn select(
    client: &mut Client,
    topic: &str,
    requested: &[i32],
) -> anyhow::Result<Vec<i32>> {
    let all: Vec<i32> = client
        .partitions(topic)
        .await?
        .iter()
        .map(|p| p.partition)
        .collect();
    if requested.is_empty() {
        return Ok(all);
    }
    for p in requested {
        if !all.contains(p) {
            bail!(
                "topic '{topic}' has no partition {p} (it has {})",
                all.len()
            );
        }
    }
    Ok(requested.to_vec())
}
