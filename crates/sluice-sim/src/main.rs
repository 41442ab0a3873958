//! `sluice-sim`: runs seeds of the replication simulation; exits 1 on the first violation.

use clap::Parser;
use sluice_sim::{run, Settings};

#[derive(Parser)]
#[command(about = "Deterministic simulation of Sluice's partition replication")]
struct Args {
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many seeds, from --seed on.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Nodes (every one a replica of the partition).
    #[arg(long, default_value_t = 3)]
    nodes: i32,
    /// Simulated milliseconds of faults, then every fault heals.
    #[arg(long, default_value_t = 20_000)]
    fault_ms: i64,
    /// Print every event (use with one seed).
    #[arg(long)]
    trace: bool,
}

fn main() {
    let args = Args::parse();
    if !(1..=9).contains(&args.nodes) {
        eprintln!("--nodes must be 1 to 9, not {}", args.nodes);
        std::process::exit(2);
    }
    let settings = Settings {
        nodes: args.nodes,
        fault_ms: args.fault_ms.max(0),
        trace: args.trace,
        ..Settings::default()
    };
    let (mut acked, mut wipes, mut moved, mut truncations, mut offline) = (0, 0, 0, 0, 0);
    for seed in args.seed..args.seed.saturating_add(args.seeds) {
        let outcome = run(seed, &settings);
        if !outcome.violations.is_empty() {
            println!("seed {seed} FAILED ({:?})", outcome.stats);
            for v in &outcome.violations {
                println!("  {v}");
            }
            println!(
                "replay: sluice-sim --seed {seed} --nodes {} --trace",
                args.nodes
            );
            std::process::exit(1);
        }
        if args.seeds == 1 {
            println!("seed {seed}: {:?}", outcome.stats);
        }
        acked += outcome.stats.acked;
        wipes += outcome.stats.wipes;
        moved += outcome.stats.reassignments_done;
        truncations += outcome.stats.truncations;
        offline += usize::from(outcome.stats.offline_after_wipe);
    }
    println!(
        "{} seeds from {} passed ({acked} acknowledged writes checked; {truncations} \
         divergent logs truncated, {wipes} disks wiped, {moved} reassignments completed; \
         {offline} runs ended offline after a wiped disk)",
        args.seeds, args.seed
    );
}
