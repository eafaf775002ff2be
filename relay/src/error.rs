//! The relay's domain errors. They say what went wrong in the domain's terms (not found, a named
//! limit, a paused sandbox, a daemon that failed) and know nothing of HTTP: `api/` maps each to
//! a status and code in one place, and MCP renders the same enum as its tool errors.
use tonic::{Code, Status};

use crate::{providers::ProviderError, refs::Candidate, store::StoreError};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A limit a request can run into, by the setting that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    BackgroundPerToken,
    StreamsPerToken,
    StreamsTotal,
    WatchesPerToken,
    UnstreamedExecsPerToken,
}

impl Limit {
    /// The setting's variable, which every refusal names so an operator knows what to raise.
    pub fn setting(self) -> &'static str {
        match self {
            Limit::BackgroundPerToken => "HANGAR_BACKGROUND_MAX_PER_TOKEN",
            Limit::StreamsPerToken => "HANGAR_STREAM_MAX_PER_TOKEN",
            Limit::StreamsTotal => "HANGAR_STREAM_MAX_TOTAL",
            Limit::WatchesPerToken => "HANGAR_WATCH_MAX_PER_TOKEN",
            Limit::UnstreamedExecsPerToken => "HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request itself is wrong: a bad argument, a path outside the sandbox, a missing `cwd`.
    #[error("{0}")]
    Invalid(String),
    /// No such thing, or not the caller's (another token's process does not exist for it).
    #[error("{0}")]
    NotFound(String),
    /// The caller's token may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// A reference (a prefix, a short name) that names more than one of the caller's things;
    /// `what` is their kind, plural.
    #[error("{reference:?} names {} {what}: {}; give more of it", candidates.len(), listed(candidates))]
    Ambiguous { what: &'static str, reference: String, candidates: Vec<Candidate> },
    /// It exists already (a sandbox's name).
    #[error("{0}")]
    Conflict(String),
    /// One of the relay's limits refused it.
    #[error("{}: {message}", limit.setting())]
    Limit { limit: Limit, message: String },
    /// The sandbox's daemon refused it for a limit of its own.
    #[error("{0}")]
    DaemonLimit(String),
    #[error("sandbox {sandbox:?} is paused: resume it first")]
    Paused { sandbox: String },
    /// What was asked needs the sandbox's daemon, and it has none.
    #[error("sandbox {sandbox:?} has no daemon: {what} needs the daemon")]
    NeedsDaemon { sandbox: String, what: &'static str },
    /// The relay cannot take it now: shutting down, or the call was cancelled.
    #[error("{0}")]
    Unavailable(String),
    /// The sandbox's provider failed (the Docker Engine, a daemon that would not start).
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The sandbox's daemon failed or answered what it should not.
    #[error("{0}")]
    Daemon(String),
    /// The relay's own state could not be read or written.
    #[error("state store: {0}")]
    Store(#[from] StoreError),
}

impl Error {
    pub fn invalid(m: impl Into<String>) -> Error {
        Error::Invalid(m.into())
    }

    pub fn not_found(m: impl Into<String>) -> Error {
        Error::NotFound(m.into())
    }

    pub fn daemon(m: impl Into<String>) -> Error {
        Error::Daemon(m.into())
    }

    pub fn unavailable(m: impl Into<String>) -> Error {
        Error::Unavailable(m.into())
    }
}

fn listed(candidates: &[Candidate]) -> String {
    candidates.iter().map(|c| format!("{} ({})", c.id, c.name)).collect::<Vec<_>>().join(", ")
}

/// A daemon's refusal as the relay's error; `what` says what was being done. The daemon's
/// codes say whose fault it was: the request's (invalid, not found), or the daemon's.
pub fn daemon_error(what: &str, s: Status) -> Error {
    let m = format!("{what}: {}", s.message());
    match s.code() {
        Code::NotFound => Error::NotFound(m),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => Error::Invalid(m),
        Code::PermissionDenied => Error::Forbidden(m),
        Code::ResourceExhausted => Error::DaemonLimit(m),
        _ => Error::Daemon(format!("{what}: the sandbox's daemon answered {}", s.message())),
    }
}
