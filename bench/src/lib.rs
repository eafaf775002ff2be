//! hangar-bench: measures hangar's streaming beside what users would use instead, in one run,
//! so that every figure can be read as a ratio on a noisy machine.
//!
//! Invariants:
//! - The bench drives the real binaries users run (the shipped daemon, the relay's release
//!   build) from outside (REST, SSE, MCP, gRPC), through the end-to-end harness (`hangar-e2e`),
//!   as users do; it links no relay or daemon code (only hangar-agents' parser, a pure function,
//!   to know which events a replayed log must make).
//! - A scenario that cannot measure what it claims (a line lost, a stream refused early, a peer
//!   missing) fails the run; it never reports a number that means something else. What was
//!   measured before the failure is still written, and the run exits non-zero.
//! - Results are written as each scenario (and each case of the agents scenario) ends, so that a
//!   later failure, a panic or a killed run loses nothing measured before it.
//! - Everything it starts (relays, daemons, containers, peers) is stopped when it ends.

pub mod error;
pub mod floor;
pub mod machine;
pub mod mcp;
pub mod pipe;
pub mod report;
pub mod scenarios;
pub mod shipped;
pub mod stats;
pub mod world;

use std::time::Instant;

use clap::ValueEnum;

pub use error::{BenchError, Result};
use report::Results;
use scenarios::{agents, claude, fleet, follow, memory, scale, starts, streaming, throughput, turns, watch};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Streaming,
    Follow,
    Watch,
    Throughput,
    Memory,
    Scale,
    Turns,
    Fleet,
    Starts,
    Agents,
    Claude,
}

pub const ALL: [Scenario; 11] = [
    Scenario::Streaming,
    Scenario::Follow,
    Scenario::Watch,
    Scenario::Throughput,
    Scenario::Memory,
    Scenario::Scale,
    Scenario::Turns,
    Scenario::Fleet,
    Scenario::Starts,
    Scenario::Agents,
    Scenario::Claude,
];

/// How much of each scenario to run: the full run behind committed results, or a quick one
/// (under two minutes) that proves every scenario still works.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub quick: bool,
    pub stream_runs: usize,
    pub stream_lines: u64,
    pub follow_lines: u64,
    pub watch_files: u64,
    pub throughput_bytes: u64,
    pub throughput_runs: usize,
    pub scale_lines: u64,
    pub turn_runs: usize,
    pub fleet_sandboxes: usize,
    pub fleet_requests: usize,
    pub fleet_changes: usize,
    pub starts: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                quick,
                stream_runs: 1,
                stream_lines: 10,
                follow_lines: 20,
                watch_files: 20,
                throughput_bytes: 256 << 20,
                throughput_runs: 1,
                scale_lines: 150,
                turn_runs: 1,
                fleet_sandboxes: 50,
                fleet_requests: 20,
                fleet_changes: 3,
                starts: 10,
            }
        } else {
            Sizes {
                quick,
                stream_runs: 5,
                stream_lines: 30,
                follow_lines: 100,
                watch_files: 100,
                throughput_bytes: 1 << 30,
                throughput_runs: 3,
                scale_lines: 300,
                turn_runs: 5,
                fleet_sandboxes: 200,
                fleet_requests: 200,
                fleet_changes: 20,
                starts: 100,
            }
        }
    }
}

/// Runs the chosen scenarios in order into `r`, calling `save` with what is measured so far as
/// each scenario, and each case of the agents scenario, ends.
pub async fn run(r: &mut Results, sizes: Sizes, only: &[Scenario], save: &dyn Fn(&Results)) -> Result<()> {
    let started = Instant::now();
    r.shipped_envd = shipped::Shipped::from_env()?;
    for s in ALL.into_iter().filter(|s| only.is_empty() || only.contains(s)) {
        let t = Instant::now();
        eprintln!("hangar-bench: {s:?}...");
        match s {
            Scenario::Streaming => {
                let cfg = streaming::Config { runs: sizes.stream_runs, lines: sizes.stream_lines };
                r.streaming = Some(streaming::run(&cfg).await?);
            }
            Scenario::Follow => r.follow = Some(follow::run(&follow::Config { lines: sizes.follow_lines }).await?),
            Scenario::Watch => r.watch = Some(watch::run(&watch::Config { files: sizes.watch_files }).await?),
            Scenario::Throughput => {
                let cfg = throughput::Config { bytes: sizes.throughput_bytes, runs: sizes.throughput_runs };
                r.throughput = Some(throughput::run(&cfg).await?);
            }
            Scenario::Memory => r.memory = Some(memory::run().await?),
            Scenario::Scale => r.scale = Some(scale::run(&scale::Config { lines: sizes.scale_lines }).await?),
            Scenario::Turns => r.turns = Some(turns::run(&turns::Config { runs: sizes.turn_runs }).await?),
            Scenario::Fleet => {
                let cfg = fleet::Config {
                    sandboxes: sizes.fleet_sandboxes,
                    requests: sizes.fleet_requests,
                    changes: sizes.fleet_changes,
                };
                r.fleet = Some(fleet::run(&cfg).await?);
            }
            Scenario::Starts => r.starts = Some(starts::run(&starts::Config { starts: sizes.starts }).await?),
            Scenario::Agents => {
                let cfg = agents::Config::new(sizes.quick)?;
                let a = agents::run(&cfg, |so_far| {
                    r.agents = Some(so_far.clone());
                    r.seconds = stats::round3(started.elapsed().as_secs_f64());
                    save(r);
                })
                .await?;
                r.agents = Some(a);
            }
            Scenario::Claude => {
                if let Some(cfg) = claude::Config::new(sizes.quick)? {
                    r.claude = Some(claude::run(&cfg).await?);
                }
            }
        }
        r.seconds = stats::round3(started.elapsed().as_secs_f64());
        save(r);
        eprintln!("hangar-bench: {s:?} done in {:.1} s", t.elapsed().as_secs_f64());
    }
    Ok(())
}
