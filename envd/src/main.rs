//! hangar-envd's entry point: read configuration, bind, announce, serve.
use std::io::Write as _;

use clap::Parser;
use hangar_envd::{config::Config, Daemon};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("HANGAR_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colours only for a terminal: logs redirected to files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = Config::parse();
    let daemon = match Daemon::bind(&config).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hangar-envd: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(addr) = daemon.local_addr() {
        // The one line on stdout: tests and supervisors read the bound address from it.
        println!("hangar-envd listening on http://{addr}");
        let _ = std::io::stdout().flush();
    }
    match daemon.run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-envd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
