//! The daemon's configuration: flags, each with an environment variable.
use std::{net::IpAddr, path::PathBuf, time::Duration};

use clap::{builder::FalseyValueParser, ArgAction, Parser};

/// E2B's envd port; the e2b SDKs assume it.
pub const DEFAULT_PORT: u16 = 49983;

#[derive(Debug, Clone, Parser)]
#[command(name = "hangar-envd", version, about = "hangar's in-sandbox daemon (E2B envd compatible)")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "HANGAR_ENVD_LISTEN", default_value = "0.0.0.0")]
    pub listen: IpAddr,

    /// Port to listen on (0 picks a free one; the bound address is printed on stdout).
    #[arg(long, env = "HANGAR_ENVD_PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,

    /// Bytes of output kept per process (stdout, stderr and PTY together), for replay.
    #[arg(long, env = "HANGAR_ENVD_RING_BYTES", default_value_t = 256 * 1024,
          value_parser = clap::value_parser!(u64).range(4096..=(1u64 << 32)))]
    pub ring_bytes: u64,

    /// File holding the access token every request but `GET /health` must carry.
    #[arg(long, env = "HANGAR_ENVD_ACCESS_TOKEN_FILE")]
    pub access_token_file: Option<PathBuf>,

    /// The access token itself (prefer the file: a flag shows in `ps`).
    #[arg(long = "access-token", env = "HANGAR_ENVD_ACCESS_TOKEN", hide_env_values = true)]
    pub access_token: Option<String>,

    /// The user calls act as when they name none (default: the daemon's own user).
    #[arg(long, env = "HANGAR_ENVD_DEFAULT_USER")]
    pub default_user: Option<String>,

    /// The working directory of processes that name none (default: the user's home).
    #[arg(long, env = "HANGAR_ENVD_DEFAULT_WORKDIR")]
    pub default_workdir: Option<PathBuf>,

    /// How long an exited process stays listed, connectable and attachable.
    #[arg(long, env = "HANGAR_ENVD_EXITED_RETENTION_SECONDS", default_value_t = 600)]
    pub exited_retention_seconds: u32,

    /// A global environment variable every process gets (repeatable), as `/init`'s `envVars`.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,

    /// The largest request message accepted, in bytes.
    #[arg(long, env = "HANGAR_ENVD_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..=(256 * 1024 * 1024)))]
    pub max_message_bytes: u64,

    /// Directory watches that may run at once (each holds one inotify instance).
    #[arg(long, env = "HANGAR_ENVD_MAX_WATCHES", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_watches: u32,

    /// Follows that may run at once (all share one inotify instance; each holds an open file and
    /// a 64 KiB buffer).
    #[arg(long, env = "HANGAR_ENVD_MAX_FOLLOWS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_follows: u32,

    /// Seconds a polled watcher (E2B's CreateWatcher) lives without a GetWatcherEvents call.
    #[arg(long, env = "HANGAR_ENVD_WATCHER_IDLE_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=86400))]
    pub watcher_idle_seconds: u32,

    /// Whether each process gets a cgroup of its own, so that killing it kills everything it
    /// started (new sessions included): `auto` where the daemon can make them (cgroup v2, root),
    /// `off` (environment marks only), `require` (refuse to start without them), `join` (as
    /// `require`, each process moving itself into its cgroup before exec, as where seccomp refuses
    /// `clone3`: slower starts, for tests).
    #[arg(long, env = "HANGAR_ENVD_CGROUPS", value_enum, default_value = "auto")]
    pub cgroups: crate::process::CgroupPolicy,

    /// Changes each watch queues for a slow client before it drops them and reports the loss.
    #[arg(long, env = "HANGAR_ENVD_WATCH_QUEUE_EVENTS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub watch_queue_events: u32,

    /// Serve only E2B's services (`process.Process`, `filesystem.Filesystem`, the plain routes):
    /// every `hangar.envd.v1` service answers as on a server without it, as E2B's own envd does.
    /// For testing clients (the relay) against E2B's protocol alone.
    #[arg(long, env = "HANGAR_ENVD_E2B_ONLY", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub e2b_only: bool,

    /// Threads that serve requests and move output (starts and file work have a blocking pool
    /// of their own). 1, the default, serves everything from the daemon's main thread: a byte of
    /// output then crosses no thread between the pipe and the socket, which took a third to a
    /// half off the daemon's CPU per GiB streamed on 2 vCPUs (docs/performance.md, scenario 4),
    /// and serving takes at most one core from the sandbox's own work.
    #[arg(long, env = "HANGAR_ENVD_WORKER_THREADS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub worker_threads: u16,

    /// The serving threads' CPU scheduling slice in microseconds (100 to 100000, or 0 for the
    /// kernel's default; Linux 6.12 and newer, older kernels ignore it). With a short slice the
    /// daemon, woken by a command's output, runs ahead of the command instead of waiting for it
    /// to yield the CPU, without taking a larger share of it (`hangar-sched`, docs/performance.md).
    #[arg(long, env = "HANGAR_ENVD_SCHED_SLICE_US", default_value_t = hangar_sched::DEFAULT_SLICE_US,
          value_parser = hangar_sched::parse_slice_us)]
    pub sched_slice_us: u32,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

impl Config {
    pub fn exited_retention(&self) -> Duration {
        Duration::from_secs(u64::from(self.exited_retention_seconds))
    }

    pub fn watch_settings(&self) -> crate::watch::WatchSettings {
        crate::watch::WatchSettings {
            max_watches: self.max_watches,
            queue_events: self.watch_queue_events as usize,
            watcher_idle: Duration::from_secs(u64::from(self.watcher_idle_seconds)),
        }
    }
}
