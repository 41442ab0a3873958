//! Asking every node of a cluster the same question: a node lists only the groups and
//! transactions it coordinates.

use std::future::Future;

use sluice_client::{Client, ClientError};

/// `ask` on a new connection to each node Metadata lists, the answers joined. A node that does
/// not answer is named on stderr; a question every node refuses fails with its reason.
pub async fn ask_every_node<T, F, Fut>(client: &mut Client, ask: F) -> anyhow::Result<Vec<T>>
where
    F: Fn(Client) -> Fut,
    Fut: Future<Output = Result<Vec<T>, ClientError>>,
{
    let mut found = Vec::new();
    let (mut answered, mut failed) = (0, None);
    for (node, addr) in client.nodes().await? {
        let answer = match Client::connect(&addr, "sluice-cli").await {
            Ok(c) => ask(c).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(list) => {
                answered += 1;
                found.extend(list);
            }
            Err(e) if failed.is_none() => failed = Some((node, addr, e)),
            Err(e) => crate::stdout::tell!("node {node} ({addr}) not listed: {e}"),
        }
    }
    match failed {
        Some((_, _, e)) if answered == 0 => Err(e.into()),
        Some((node, addr, e)) => {
            crate::stdout::tell!("node {node} ({addr}) not listed: {e}");
            Ok(found)
        }
        None => Ok(found),
    }
}
