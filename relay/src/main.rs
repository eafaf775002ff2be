//! hangar-relay's entry point: `hangar-relay serve`.
use std::io::Write as _;

use clap::Parser;
use hangar_relay::{
    app,
    config::{Cli, Command, Config},
};

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("HANGAR_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colours only for a terminal: logs redirected to files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let Cli { command: Command::Serve(config) } = Cli::parse();
    let request_slice = app::thread_start(config.sched_slice_us);
    // Every thread: the main one (it accepts connections in `block_on`), the workers and the
    // blocking pool (tokio has no hook for workers alone), and the store's threads (`app::bind`).
    // Processes the relay starts keep the kernel's default.
    request_slice();
    let runtime = tokio::runtime::Builder::new_multi_thread().on_thread_start(request_slice).enable_all().build();
    match runtime {
        Ok(rt) => rt.block_on(serve(config)),
        Err(e) => {
            eprintln!("hangar-relay: starting the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> std::process::ExitCode {
    let bound = match hangar_relay::app::bind(&config).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("hangar-relay: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    if let Some(secret) = &bound.generated_admin_secret {
        // Shown once: only its hash is kept.
        let _ = writeln!(out, "admin token (shown once): {secret}");
    }
    if let Ok(addr) = bound.listener.local_addr() {
        let _ = writeln!(out, "hangar-relay listening on http://{addr}");
    }
    let _ = out.flush();
    match hangar_relay::app::serve(bound).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-relay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
