//! `hangar-bench`: bench/run builds it in release mode and calls it with the binaries and
//! images in place; it runs the scenarios and writes the JSON and Markdown results.

use std::path::PathBuf;

use clap::Parser;
use hangar_bench::{report, run, Scenario, Sizes};

#[derive(Parser)]
#[command(about = "Measures hangar's streaming beside what users would use instead")]
struct Args {
    /// A short run (under two minutes) that proves every scenario still works.
    #[arg(long)]
    quick: bool,
    /// Names the results: <out>/<date>-<name>.json and .md.
    #[arg(long, default_value = "hangar")]
    name: String,
    /// Where the results go.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Only these scenarios (comma-separated); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let results = match run(&args.name, Sizes::new(args.quick), &args.only).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hangar-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match report::write(&results, &args.out) {
        Ok(json) => {
            println!("{}", json.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hangar-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
