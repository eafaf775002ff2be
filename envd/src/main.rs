//! hangar-envd's entry point: an agent-side command, or the daemon (read configuration, bind,
//! announce, serve).
use std::{ffi::OsString, io::Write as _, process::ExitCode};

use clap::{CommandFactory as _, FromArgMatches as _};
use hangar_envd::{agent, config::Config, events, Daemon};
use tracing::Level;
use tracing_subscriber::{filter::Targets, layer::SubscriberExt as _, util::SubscriberInitExt as _};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    // Decided before the daemon's flags are parsed: an agent-side command starts no runtime, no
    // logging and no daemon.
    if agent::is_invocation(&args) {
        return agent::main(args);
    }
    daemon()
}

fn daemon() -> ExitCode {
    // `HANGAR_LOG` as `target=level` pairs and a default level (tracing's `Targets`): the full
    // `EnvFilter` would link a regex engine, about 0.3 MiB of code, into a binary users ship.
    let mut invalid = None;
    let filter = std::env::var("HANGAR_LOG")
        .ok()
        .and_then(|value| value.parse::<Targets>().map_err(|error| invalid = Some((value, error))).ok())
        .unwrap_or_else(|| Targets::new().with_default(Level::INFO));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only for a terminal: logs redirected to files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(filter)
        .init();
    if let Some((value, error)) = invalid {
        events::LogFilterInvalid { value: &value, error: &error }.emit();
    }
    let matches = Config::command().after_help(agent::DAEMON_HELP_NOTE).get_matches();
    let config = Config::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let slice_us = config.sched_slice_us;
    let request_slice = move || {
        hangar_sched::request_for_thread(slice_us, |error| events::SchedSliceRefused { slice_us, error }.emit())
    };
    // Named so that `ps -L` (and the tests) tell a blocking-pool thread from a serving one.
    let runtime = match config.worker_threads {
        1 => {
            // The main thread serves; the blocking pool, started from it, keeps the default.
            request_slice();
            tokio::runtime::Builder::new_current_thread().thread_name("envd-blocking").enable_all().build()
        }
        // Workers and blocking threads alike: tokio has no hook for workers alone.
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.into())
            .thread_name("envd-worker")
            .on_thread_start(request_slice)
            .enable_all()
            .build(),
    };
    match runtime {
        Ok(rt) => rt.block_on(serve(config)),
        Err(e) => {
            eprintln!("hangar-envd: starting the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> ExitCode {
    let daemon = match Daemon::bind(&config).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hangar-envd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = daemon.local_addr() {
        // The one line on stdout: tests and supervisors read the bound address from it.
        println!("hangar-envd listening on http://{addr}");
        let _ = std::io::stdout().flush();
    }
    match daemon.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-envd: {e}");
            ExitCode::FAILURE
        }
    }
}
