//! `sluice cluster add-node N [--voter]`: confirm that a node started with `--internal-listen`
//! has joined (the cluster lists it as a live broker), and with `--voter` make it a voter of
//! the metadata group (AddRaftVoter). A node joins by being started; this command waits for
//! that and says what to do when it has not happened.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::bail;
use sluice_client::Client;

pub async fn run(
    client: &mut Client,
    node: i32,
    voter: bool,
    wait: Duration,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    #[allow(clippy::disallowed_methods)] // a CLI deadline, not broker logic
    let deadline = Instant::now() + wait;
    loop {
        let described = client.describe_cluster().await?;
        match described.nodes.iter().find(|n| n.id == node) {
            Some(n) if !n.fenced => {
                writeln!(out, "node {node} has joined ({}:{})", n.host, n.port)?;
                break;
            }
            found => {
                #[allow(clippy::disallowed_methods)]
                let late = Instant::now() >= deadline;
                if late {
                    let state = if found.is_some() {
                        "is registered but not live (down, or out of touch with the controller)"
                    } else {
                        "has not joined"
                    };
                    bail!(
                        "node {node} {state}: start it with `sluice serve --node-id {node} \
                         --cluster <the cluster's voters> --internal-listen HOST:PORT`"
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    if voter {
        client.change_voter(node, true).await?;
        writeln!(out, "node {node} is now a voter of the metadata group")?;
    }
    Ok(())
}
