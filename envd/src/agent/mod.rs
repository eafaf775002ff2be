//! The agent-side commands: how an agent in a sandbox reaches a person's inbox through files.
//!
//! `hangar-envd question|progress|approve ...` (or the binary invoked as `hangar-agent`, a
//! symlink) writes a request file into the inbox directory (`$HANGAR_INBOX`, which the agent can
//! write) and, for a question or an approval, waits for the answer file the relay writes into the
//! answers directory (`$HANGAR_ANSWERS`, which the agent can only read). The file shapes and
//! limits are `hangar_agents::inbox`'s, which the relay parses with too.
//!
//! A small synchronous program: no tokio runtime, no logging set-up, and never the daemon. It
//! polls for the answer every 100 ms. `approve` is a Claude Code `PreToolUse` hook and fails
//! closed: once a call may need approval, every failure prints a deny decision.
//!
//! Exit codes: 0 done (answered, written, or a hook decision printed), 1 a failure (I/O, an
//! interruption, an answer of the wrong kind), 2 bad usage, bad input or not inside a hangar turn
//! (for `approve`: even a deny decision could not be printed), 3 the question expired or was
//! declined, 4 `--timeout` passed.

mod approve;
mod ask;
mod files;
mod turn_log;

use std::{ffi::OsString, io::Write as _, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};
use hangar_agents::inbox::{PolicyError, RequestError};

/// The subcommands that make `hangar-envd` run as an agent-side command.
pub const SUBCOMMANDS: [&str; 4] = ["question", "progress", "approve", "turn-log"];

/// The name under which the binary is always an agent-side command (a symlink to it).
pub const AGENT_NAME: &str = "hangar-agent";

/// A line for the daemon's `--help`, so that the subcommands can be found from it.
pub const DAEMON_HELP_NOTE: &str =
    "Agent-side commands (inside a hangar turn; docs/envd.md, \"Agent-side commands\"):\n  \
     hangar-envd question TEXT [--option A]... [--timeout SECONDS]\n  \
     hangar-envd progress [--pct N] TEXT\n  \
     hangar-envd approve --policy PATTERN...   (a Claude Code PreToolUse hook)\n  \
     hangar-envd turn-log --max-bytes N        (the turn supervisor's log writer)\n\
     Each has its own --help; invoked as `hangar-agent`, the binary runs only these.";

/// Whether this argv is an agent-side command rather than the daemon: argv[1] names one, or
/// the binary was invoked as `hangar-agent`.
pub fn is_invocation(args: &[OsString]) -> bool {
    let invoked_as_agent =
        args.first().and_then(|a| std::path::Path::new(a).file_name()).is_some_and(|name| name == AGENT_NAME);
    invoked_as_agent || args.get(1).is_some_and(|a| SUBCOMMANDS.iter().any(|s| a == *s))
}

/// Runs an agent-side command; `args` is the whole argv (argv[0] included).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors to stderr with 2, which for
            // `approve` blocks the call (Claude Code lets other non-zero codes through).
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let code = match cli.command {
        Command::Question(args) => ask::question(args),
        Command::Progress(args) => ask::progress(args),
        Command::Approve(args) => approve::run(args),
        Command::TurnLog(args) => turn_log::run(args),
    };
    ExitCode::from(code)
}

#[derive(Debug, Parser)]
#[command(
    name = "hangar-agent",
    version,
    about = "Reach a person's hangar inbox from inside a turn: ask a question, report progress, or ask for approval of a tool call",
    after_help = "Exit codes: 0 done, 1 a failure, 2 bad usage or input or not inside a hangar turn, \
                  3 the question expired or was declined, 4 --timeout passed. See docs/envd.md, \"Agent-side commands\"."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask the person a question and print their answer on stdout.
    Question(QuestionArgs),
    /// Say how the turn is going (one progress file per turn, overwritten); returns at once.
    Progress(ProgressArgs),
    /// A Claude Code PreToolUse hook: ask the person to approve a tool call that a policy
    /// pattern holds, and print the decision.
    Approve(ApproveArgs),
    /// The turn supervisor's log writer: standard input to standard output (the log, opened
    /// for appending), lines over 1 MiB cut and the log kept to --max-bytes, each said by a
    /// mark in the log.
    TurnLog(TurnLogArgs),
}

/// Where requests are written and answers read.
#[derive(Debug, Args)]
struct Dirs {
    /// The directory requests are written to [default: $HANGAR_INBOX, else $HOME/.hangar/inbox].
    #[arg(long, value_name = "DIR")]
    inbox: Option<PathBuf>,
    /// The directory answers appear in [default: $HANGAR_ANSWERS].
    #[arg(long, value_name = "DIR")]
    answers: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct QuestionArgs {
    /// The question.
    text: String,
    /// An answer the person may pick (repeatable, at most 5, each at most 80 characters).
    #[arg(long = "option", value_name = "A")]
    options: Vec<String>,
    /// Give up after this many seconds (exit 4) [default: wait until answered or expired].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    timeout: Option<Duration>,
    #[command(flatten)]
    dirs: Dirs,
}

#[derive(Debug, Args)]
struct ProgressArgs {
    /// What is happening.
    text: String,
    /// How far along, in percent.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=100))]
    pct: Option<u8>,
    #[command(flatten)]
    dirs: Dirs,
}

#[derive(Debug, Args)]
struct ApproveArgs {
    /// A Claude Code permission-rule pattern: `Tool`, `Tool(glob)` or `*` (repeatable). Calls no
    /// pattern holds get no decision from this hook.
    #[arg(long = "policy", value_name = "PATTERN", required = true)]
    policies: Vec<String>,
    /// The session [default: $HANGAR_SESSION].
    #[arg(long)]
    session: Option<String>,
    /// The turn [default: $HANGAR_TURN].
    #[arg(long)]
    turn: Option<String>,
    /// Deny after this many seconds without an answer; keep it under the hook's own `timeout`
    /// in the settings file.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, default_value = "540")]
    timeout: Duration,
    #[command(flatten)]
    dirs: Dirs,
}

#[derive(Debug, Args)]
struct TurnLogArgs {
    /// The most the log holds; past it only a mark saying so and the harness's last line are
    /// written.
    #[arg(long, value_name = "BYTES")]
    max_bytes: u64,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs <= 0.0 {
        return Err("the timeout must be over 0 seconds".into());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a usable number of seconds"))
}

/// Exit codes.
const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_EXPIRED: u8 = 3;
const EXIT_TIMEOUT: u8 = 4;

/// What stops an agent-side command.
#[derive(Debug, thiserror::Error)]
enum AgentError {
    #[error("not inside a hangar turn (HANGAR_ANSWERS is not set)")]
    NotInTurn,
    #[error("no inbox directory: neither HANGAR_INBOX nor HOME is set")]
    NoInbox,
    #[error("the answers directory {} is not a directory", .0.display())]
    AnswersDir(PathBuf),
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("bad approval policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("reading the hook input from stdin: {0}")]
    Stdin(std::io::Error),
    #[error("no answer within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("interrupted while waiting for an answer")]
    Interrupted,
    #[error("unexpected answer `{0}` to {1}")]
    Unexpected(&'static str, &'static str),
}

impl AgentError {
    fn exit_code(&self) -> u8 {
        match self {
            AgentError::NotInTurn | AgentError::NoInbox | AgentError::AnswersDir(_) => EXIT_USAGE,
            AgentError::Request(_) | AgentError::Policy(_) => EXIT_USAGE,
            AgentError::Timeout(_) => EXIT_TIMEOUT,
            AgentError::Write { .. }
            | AgentError::Read { .. }
            | AgentError::Stdin(_)
            | AgentError::Interrupted
            | AgentError::Unexpected(..) => EXIT_FAILURE,
        }
    }
}

/// A line on stderr, prefixed `hangar: `. A failed write to stderr is ignored: there is nowhere
/// else to say it.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "hangar: {message}");
}

/// A `HANGAR_*` variable, when set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Dirs {
    fn inbox(&self) -> Result<PathBuf, AgentError> {
        if let Some(dir) = &self.inbox {
            return Ok(dir.clone());
        }
        if let Some(dir) = env("HANGAR_INBOX") {
            return Ok(dir.into());
        }
        let home = env("HOME").ok_or(AgentError::NoInbox)?;
        Ok(PathBuf::from(home).join(".hangar").join("inbox"))
    }

    /// The answers directory, which must exist: it is made by hangar, never by this command
    /// (the agent must not be able to write it).
    fn answers(&self) -> Result<PathBuf, AgentError> {
        let dir = match &self.answers {
            Some(dir) => dir.clone(),
            None => env("HANGAR_ANSWERS").ok_or(AgentError::NotInTurn)?.into(),
        };
        if !dir.is_dir() {
            return Err(AgentError::AnswersDir(dir));
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn which_argv_is_an_agent_command() {
        assert!(is_invocation(&argv(&["hangar-envd", "question", "hi"])));
        assert!(is_invocation(&argv(&["/usr/local/bin/hangar-envd", "approve", "--policy", "Bash"])));
        assert!(is_invocation(&argv(&["/usr/local/bin/hangar-agent"])));
        assert!(is_invocation(&argv(&["hangar-agent", "--port", "0"])));
        assert!(!is_invocation(&argv(&["hangar-envd"])));
        assert!(!is_invocation(&argv(&["hangar-envd", "--port", "0", "question"])));
        assert!(!is_invocation(&argv(&["/opt/hangar-agent/hangar-envd", "--help"])));
        assert!(!is_invocation(&[]));
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("540"), Ok(Duration::from_secs(540)));
        for bad in ["0", "-1", "NaN", "inf", "1e300", "soon", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn clap_definition_is_valid() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
