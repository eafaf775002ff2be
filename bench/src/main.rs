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
    let mut results = report::Results::new(&args.name, args.quick);
    // Written as each part ends: a later failure, or a kill, loses nothing measured before it.
    let save = |r: &report::Results| {
        if let Err(e) = report::write(r, &args.out) {
            eprintln!("hangar-bench: {e}");
        }
    };
    let ran = run(&mut results, Sizes::new(args.quick), &args.only, &save).await;
    let written = report::write(&results, &args.out);
    match &written {
        Ok(json) => println!("{}", json.display()),
        Err(e) => eprintln!("hangar-bench: {e}"),
    }
    let mut failed = results.failures();
    if let Err(e) = ran {
        failed.push(e.to_string());
    }
    for f in &failed {
        eprintln!("hangar-bench: failed: {f}");
    }
    if failed.is_empty() && written.is_ok() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
