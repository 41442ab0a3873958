//! Runs the simulation over many seeds (`SLUICE_SIM_SEEDS`, default 2,000 with 3 nodes and 1,000
//! with 5; the long sweep is `sluice-sim --seeds 100000`). A failure names its seed, which
//! replays exactly with `cargo run -p sluice-sim --release -- --seed N --trace`.

use sluice_sim::{run, Settings};

fn seeds(default: u64) -> u64 {
    std::env::var("SLUICE_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sweep(nodes: i32, count: u64) {
    let settings = Settings {
        nodes,
        ..Settings::default()
    };
    let mut acked = 0;
    for seed in 0..count {
        let outcome = run(seed, &settings);
        assert!(
            outcome.violations.is_empty(),
            "seed {seed} with {nodes} nodes: {:#?}\n{:?}",
            outcome.violations,
            outcome.stats
        );
        acked += outcome.stats.acked;
    }
    // The runs did work: a sweep where nothing is acknowledged checks nothing.
    assert!(
        acked as u64 > count * 50,
        "only {acked} writes acknowledged"
    );
}

#[test]
fn three_nodes_keep_every_acknowledged_write() {
    sweep(3, seeds(2_000));
}

#[test]
fn five_nodes_keep_every_acknowledged_write() {
    sweep(5, seeds(1_000));
}

#[test]
fn a_seed_replays_exactly() {
    let settings = Settings::default();
    let (a, b) = (run(7, &settings), run(7, &settings));
    assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
    assert!(a.stats.events > 1_000);
}
