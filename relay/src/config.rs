//! The relay's configuration: `hangar-relay serve` flags, each with a `HANGAR_*` variable.
use std::{net::SocketAddr, path::PathBuf};

use clap::{builder::FalseyValueParser, ArgAction, Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "hangar-relay", version, about = "hangar's control-plane streaming layer")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the REST/SSE API.
    Serve(Config),
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address and port to serve on.
    #[arg(long, env = "HANGAR_LISTEN", default_value = "127.0.0.1:7470")]
    pub listen: SocketAddr,

    /// Directory for the SQLite database, the MAC key and local sandboxes.
    #[arg(long, env = "HANGAR_STATE_DIR", default_value_os_t = default_state_dir())]
    pub state_dir: PathBuf,

    /// The admin token; without it one is generated at first start and printed once.
    #[arg(long = "admin-token", env = "HANGAR_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// `Host` values the MCP endpoint accepts, comma-separated (DNS-rebinding protection); a
    /// public deployment lists its own names.
    #[arg(
        long = "mcp-allowed-hosts",
        env = "HANGAR_MCP_ALLOWED_HOSTS",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    pub mcp_allowed_hosts: Vec<String>,

    /// The hangar-envd binary local sandboxes run (default: beside this executable).
    #[arg(long, env = "HANGAR_ENVD_BIN")]
    pub envd_bin: Option<PathBuf>,

    /// Let user and mcp tokens use local sandboxes that isolate nothing (the relay is not root,
    /// or cannot make namespaces): their commands run as the relay's own user and can take the
    /// relay over. Without it only admin tokens may use such sandboxes.
    #[arg(long, env = "HANGAR_ALLOW_UNISOLATED_SANDBOXES", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub allow_unisolated_sandboxes: bool,

    /// The size in MiB of a new local sandbox's own filesystem when its `disk_mib` option does
    /// not say (only where sandboxes are isolated: docs/operations.md).
    #[arg(long, env = "HANGAR_LOCAL_DISK_MIB", default_value_t = crate::providers::local::DEFAULT_DISK_MIB,
          value_parser = clap::value_parser!(u64).range(
              crate::providers::local::MIN_DISK_MIB..=crate::providers::local::MAX_DISK_MIB))]
    pub local_disk_mib: u64,

    /// For tests only: start local sandboxes without namespaces or a user of their own, as a
    /// relay that cannot isolate them would.
    #[arg(long, env = "HANGAR_TEST_DISABLE_ISOLATION", hide = true, action = ArgAction::SetTrue,
          value_parser = FalseyValueParser::new())]
    pub test_disable_isolation: bool,

    /// Seconds a ticket from `POST /api/tickets` stays usable (a browser's way into an SSE
    /// stream): it should be opened at once.
    #[arg(long, env = "HANGAR_TICKET_SECONDS", default_value_t = 60.0)]
    pub ticket_seconds: f64,

    /// The relay's threads' CPU scheduling slice in microseconds (100 to 100000, or 0 for the
    /// kernel's default; Linux 6.12 and newer, older kernels ignore it): with a short one, a line
    /// arriving from a daemon is sent on ahead of whatever holds the CPU
    /// (`hangar-sched`, docs/performance.md).
    #[arg(long, env = "HANGAR_SCHED_SLICE_US", default_value_t = hangar_sched::DEFAULT_SLICE_US,
          value_parser = hangar_sched::parse_slice_us)]
    pub sched_slice_us: u32,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub sessions: SessionSettings,

    #[command(flatten)]
    pub e2b: crate::providers::e2b::Settings,

    #[command(flatten)]
    pub kubernetes: crate::providers::kubernetes::Settings,
}

/// How agent sessions run (docs/operations.md lists them).
#[derive(Debug, Clone, Args)]
pub struct SessionSettings {
    /// A TOML file of harness profiles, added to the built-in ones (a profile with a built-in's
    /// name replaces it); docs/sessions.md describes it.
    #[arg(long, env = "HANGAR_HARNESSES")]
    pub harnesses: Option<PathBuf>,

    /// Turns being started at once, in all sandboxes: a start runs scripts in its sandbox, and
    /// on a machine that also runs the sandboxes, a thousand at once starve each other past
    /// their timeout. More wait in `starting`.
    #[arg(long, env = "HANGAR_MAX_STARTING", default_value_t = 16)]
    pub max_starting: usize,

    /// Turns running at once per credential; more wait `queued/credential_concurrency`.
    #[arg(long, env = "HANGAR_MAX_RUNS_PER_CREDENTIAL", default_value_t = 2)]
    pub max_runs_per_credential: usize,

    /// A start warns when its credential's last reported plan usage is at this percentage.
    #[arg(long, env = "HANGAR_USAGE_WARN_PCT", default_value_t = 80.0)]
    pub usage_warn_pct: f64,

    /// New turns wait `queued/plan_limit` at this percentage until the window resets.
    #[arg(long, env = "HANGAR_USAGE_GATE_PCT", default_value_t = 95.0)]
    pub usage_gate_pct: f64,

    /// How often a turn's log is read when it is polled rather than followed.
    #[arg(long, env = "HANGAR_SESSION_POLL_SECONDS", default_value_t = 5.0)]
    pub poll_seconds: f64,

    /// How often a turn without a daemon is judged alive or dead.
    #[arg(long, env = "HANGAR_RUN_PROBE_SECONDS", default_value_t = 15.0)]
    pub probe_seconds: f64,

    /// Follow running turns' logs through the daemon (false: poll them).
    #[arg(long, env = "HANGAR_STREAM_TURN_LOGS", default_value_t = true, action = ArgAction::Set,
          value_parser = FalseyValueParser::new())]
    pub stream_turn_logs: bool,

    /// Days session events are kept.
    #[arg(long, env = "HANGAR_RUN_EVENT_RETENTION_DAYS", default_value_t = 14.0)]
    pub event_retention_days: f64,

    /// Events kept per session (the newest).
    #[arg(long, env = "HANGAR_RUN_EVENT_MAX", default_value_t = 20_000)]
    pub event_max: i64,

    /// Events a turn's log makes that are recorded, as they are written; past it they are
    /// counted in one `harness.truncated`, and the last `run.result`, `usage`, `rate_limit` and
    /// `input.requested` are still kept.
    #[arg(long, env = "HANGAR_TURN_EVENT_MAX", default_value_t = 20_000)]
    pub turn_event_max: u64,

    /// The most a turn's log holds, in bytes; past it the harness's output is read and dropped
    /// (its last line aside) and the turn gets a `harness.truncated` with `reason: "log_full"`.
    #[arg(long, env = "HANGAR_TURN_LOG_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub turn_log_max_bytes: u64,

    /// Seconds an approval or an agent's question waits for a person before it ends by itself
    /// (the call denied, the question unanswered).
    #[arg(long, env = "HANGAR_INBOX_EXPIRY_SECONDS", default_value_t = 3600.0)]
    pub inbox_expiry_seconds: f64,
}

impl SessionSettings {
    fn seconds(s: f64, floor: f64) -> std::time::Duration {
        let s = if s.is_nan() { floor } else { s };
        std::time::Duration::from_secs_f64(s.clamp(floor, 24.0 * 3600.0))
    }

    pub fn poll(&self) -> std::time::Duration {
        Self::seconds(self.poll_seconds, 0.05)
    }

    pub fn probe(&self) -> std::time::Duration {
        Self::seconds(self.probe_seconds, 0.05)
    }

    /// An inbox ask's life: a second to a day.
    pub fn inbox_expiry(&self) -> std::time::Duration {
        Self::seconds(self.inbox_expiry_seconds, 1.0)
    }
}

/// The limits every stream, process and watch is held to (docs/operations.md lists them).
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Running background processes per token (per sandbox).
    #[arg(long, env = "HANGAR_BACKGROUND_MAX_PER_TOKEN", default_value_t = 16)]
    pub background_per_token: usize,

    /// Running unstreamed execs per token (in all sandboxes): each counts until its command
    /// ends, whatever its client does.
    #[arg(long, env = "HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN", default_value_t = 16)]
    pub unstreamed_execs_per_token: usize,

    /// Open streams per token: streamed execs, attaches, watch and event streams.
    #[arg(long, env = "HANGAR_STREAM_MAX_PER_TOKEN", default_value_t = 16)]
    pub streams_per_token: usize,

    /// Open streams in all.
    #[arg(long, env = "HANGAR_STREAM_MAX_TOTAL", default_value_t = 512)]
    pub streams_total: usize,

    /// Bytes per second per stream; each message also counts 64 bytes.
    #[arg(long, env = "HANGAR_STREAM_BYTES_PER_SECOND", default_value_t = 1024 * 1024)]
    pub bytes_per_second: u64,

    /// Bytes per stream; past it nothing more is sent.
    #[arg(long, env = "HANGAR_STREAM_MAX_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_bytes: u64,

    /// Bytes the relay keeps for a stream's client that reads slower than its stream comes (each
    /// message counting 64 bytes more). Past it a process stream's oldest output becomes a
    /// `gap`, a watch's newest changes an `overflow`, and a streamed command waits for its
    /// client (see HANGAR_STREAM_STALL_SECONDS).
    #[arg(long, env = "HANGAR_STREAM_BUFFER_BYTES", default_value_t = 256 * 1024)]
    pub buffer_bytes: usize,

    /// Seconds a streamed command waits for a client that reads nothing; then its output runs
    /// on and the client, when it reads again, gets a `gap`.
    #[arg(long, env = "HANGAR_STREAM_STALL_SECONDS", default_value_t = 5.0)]
    pub stall_seconds: f64,

    /// Hours an attach, watch or event stream may stay open.
    #[arg(long, env = "HANGAR_STREAM_MAX_HOURS", default_value_t = 12.0)]
    pub max_hours: f64,

    /// Directory watches per token.
    #[arg(long, env = "HANGAR_WATCH_MAX_PER_TOKEN", default_value_t = 8)]
    pub watches_per_token: usize,

    /// How often open streams check that their token is still valid.
    #[arg(long, env = "HANGAR_STREAM_RECHECK_SECONDS", default_value_t = 5.0)]
    pub recheck_seconds: f64,
}

impl Limits {
    pub fn lifetime(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64((self.max_hours * 3600.0).clamp(1.0, 10.0 * 365.0 * 24.0 * 3600.0))
    }

    pub fn stall(&self) -> std::time::Duration {
        // A NaN would pass `clamp` and panic in `from_secs_f64`: it means the floor.
        let seconds = if self.stall_seconds.is_nan() { 0.0 } else { self.stall_seconds };
        std::time::Duration::from_secs_f64(seconds.clamp(0.05, 24.0 * 3600.0))
    }

    pub fn recheck(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.recheck_seconds.clamp(0.05, 3600.0))
    }
}

fn default_state_dir() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".")).join(".hangar")
}

impl Config {
    /// A ticket's lifetime: 0.1 s to an hour (a NaN means the floor).
    pub fn ticket_lifetime(&self) -> std::time::Duration {
        let s = if self.ticket_seconds.is_nan() { 0.1 } else { self.ticket_seconds };
        std::time::Duration::from_secs_f64(s.clamp(0.1, 3600.0))
    }

    /// The envd binary: the flag, else `hangar-envd` beside the running executable.
    pub fn envd_bin(&self) -> PathBuf {
        self.envd_bin.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("hangar-envd")))
                .unwrap_or_else(|| PathBuf::from("hangar-envd"))
        })
    }
}
