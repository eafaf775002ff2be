//! The command line: every command, flag and argument, in one tree (clap derives it; the shell
//! completions are generated from the same tree).
use clap::{ArgGroup, Args, Parser, Subcommand};

use crate::client::DEFAULT_URL;

#[derive(Debug, Parser)]
#[command(
    name = "hangar",
    version,
    about = "Drive hangar's relay from a terminal: sandboxes, commands, background processes, agent sessions, jobs, the inbox, tokens and the fleet",
    after_help = "The relay is HANGAR_URL (default http://127.0.0.1:7470) and the token HANGAR_TOKEN.\n\
                  Every command that reads prints the relay's JSON with -o json (one JSON line per event for streams).\n\
                  Exit codes: 0 ok; 1 the relay refused or could not be reached; 2 usage; a followed turn or job\n\
                  that ended failed 3, cancelled or timed out 4, waiting for input (--until-input) 5; exec and attach:\n\
                  the command's own."
)]
pub struct Cli {
    /// The relay's address [env: HANGAR_URL] [default: http://127.0.0.1:7470].
    // The environment is read by hand (`url`, `token` below): clap's `env` would name these
    // flags in every usage message, as if they were required.
    #[arg(long = "url", global = true, value_name = "URL")]
    pub url_flag: Option<String>,

    /// The token [env: HANGAR_TOKEN] (prefer the variable: a flag shows in the process list).
    /// Never printed.
    #[arg(long = "token", global = true, value_name = "TOKEN")]
    pub token_flag: Option<String>,

    /// Print the relay's JSON (one document; one JSON line per event for streams): `-o json`.
    #[arg(long, global = true)]
    pub json: bool,

    /// How listings and gets print: `json` (the relay's JSON as is), `wide` (more columns),
    /// `name` (one id, or a unit's short name, per line, for scripts). Default: a table.
    #[arg(short = 'o', long = "output", global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,

    /// Colour states: `auto` (on a terminal, unless NO_COLOR is set), `always`, `never`.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, value_name = "WHEN")]
    pub color: Color,

    #[command(subcommand)]
    pub command: Command,
}

/// `-o`'s formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Json,
    Wide,
    Name,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

impl Cli {
    /// `-o`, where `--json` is `-o json`.
    pub fn output(&self) -> Option<Output> {
        if self.json {
            Some(Output::Json)
        } else {
            self.output
        }
    }

    /// `--url`, else `HANGAR_URL`, else the default.
    pub fn url(&self) -> String {
        self.url_flag.clone().or_else(|| env_var("HANGAR_URL")).unwrap_or_else(|| DEFAULT_URL.to_string())
    }

    /// `--token`, else `HANGAR_TOKEN`.
    pub fn token(&self) -> Option<String> {
        self.token_flag.clone().or_else(|| env_var("HANGAR_TOKEN"))
    }
}

/// A variable's value; unset and empty are the same.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List sandboxes (or create and remove them).
    Sandboxes(SandboxesArgs),
    /// Run a command in a sandbox, its output streamed as it prints; exits with its exit code.
    Exec(ExecArgs),
    /// List your background processes in a sandbox.
    Ps(SandboxArg),
    /// Start a background process; prints its id.
    Start(StartArgs),
    /// Replay a background process's output, then follow it live. Ctrl-C detaches (it keeps running).
    Attach(AttachArgs),
    /// Stop a background process (SIGTERM to its group, SIGKILL 3 s later).
    Kill(ProcessArg),
    /// Watch a directory in a sandbox: one line per change.
    Watch(WatchArgs),
    /// List agent sessions.
    Sessions,
    /// Start, prompt, cancel or show an agent session.
    #[command(subcommand)]
    Session(SessionCmd),
    /// A session's events, one line each (--follow: stay for the next turns).
    Events(EventsArgs),
    /// What a session's agent has changed since its turn started: a line per file (+added
    /// -removed), or with a path that file's patch.
    Diff(crate::diff::DiffArgs),
    /// List jobs.
    Jobs,
    /// A job's status (`hangar job ID`), or start, cancel or follow one.
    Job(JobArgs),
    /// What waits on you: approvals, questions, failures.
    Inbox(InboxArgs),
    /// Allow a held tool call.
    Allow(DecideArgs),
    /// Deny a held tool call.
    Deny(DecideArgs),
    /// Answer an agent's question.
    Answer(AnswerArgs),
    /// Acknowledge a failed or denied item.
    Ack(ItemArg),
    /// Manage tokens (admin): list (the default), create, revoke.
    Tokens(TokensArgs),
    /// Every agent at a glance, redrawn as it changes (like top); --once prints it once.
    Fleet(FleetArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct SandboxesArgs {
    #[command(subcommand)]
    pub command: Option<SandboxesCmd>,
}

#[derive(Debug, Subcommand)]
pub enum SandboxesCmd {
    /// List sandboxes (the default).
    List,
    /// One sandbox.
    Get(SandboxArg),
    /// Create a sandbox.
    Create(CreateSandboxArgs),
    /// Destroy a sandbox and everything running in it.
    Rm(SandboxArg),
    /// Pause a sandbox (its owner or an admin): its streams end; nothing runs in it until resumed.
    Pause(SandboxArg),
    /// Resume a paused sandbox (its owner or an admin).
    Resume(SandboxArg),
    /// Set whom a sandbox is shared with (its owner or an admin): the persons named, replacing
    /// those before; none: shared with nobody.
    Share(ShareSandboxArgs),
}

#[derive(Debug, Args)]
pub struct ShareSandboxArgs {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// A person's id, or `*` for every person.
    pub persons: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateSandboxArgs {
    /// 1 to 63 of a-z 0-9 - _, starting with a letter or digit.
    pub name: String,
    /// `local` (the relay's default) or `docker`.
    #[arg(long)]
    pub provider: Option<String>,
    /// A provider option, KEY=VALUE (VALUE is JSON if it parses as JSON, else a string); repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE", value_parser = parse_option)]
    pub options: Vec<(String, serde_json::Value)>,
    /// Share it with this person (its id; `*`: every person), who may then run commands, processes,
    /// watches and sessions in it; repeatable.
    #[arg(long = "share", value_name = "PERSON")]
    pub share: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SandboxArg {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
}

#[derive(Debug, Args)]
pub struct ProcessArg {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// The process's id (p_...).
    pub id: String,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// Where it runs: absolute, or relative to the sandbox's working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Seconds before it is killed (the relay's default is 600).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// With -t: send this terminal's input (`exec -it`).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// A terminal in the sandbox (a PTY; no CMD: a login shell), raw mode here, its exit code.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The command: one argument is a shell command line (`bash -lc`); several are quoted word by word.
    #[arg(required_unless_present = "tty", trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// Where it runs: absolute, or relative to the sandbox's working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// The command: one argument is a shell command line (`bash -lc`); several are quoted word by word.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// The process's id (p_...).
    pub id: String,
    /// Start at this byte offset of its output (default: the oldest kept).
    #[arg(long, value_name = "BYTES")]
    pub since: Option<u64>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The sandbox: its name, id, short name (HGR-8AA3) or a unique prefix of its id or name.
    pub sandbox: String,
    /// The directory: absolute, or relative to the sandbox's working directory.
    pub path: String,
    /// Watch every directory below too.
    #[arg(short, long)]
    pub recursive: bool,
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Start a session: its first turn runs the agent with the prompt.
    Start(SessionStartArgs),
    /// A follow-up turn in a session whose turn has ended.
    Prompt(SessionPromptArgs),
    /// Cancel a session's live turn (SIGTERM, SIGKILL 10 s later).
    Cancel(SessionArg),
    /// A session: its state, turns and summary.
    Show(SessionArg),
    /// Delete a session with its turns and events (a live turn is cancelled first).
    Rm(SessionArg),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("prompt_from").required(true).args(["prompt", "prompt_file"])))]
pub struct SessionStartArgs {
    /// 1 to 64 letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The sandbox it runs in.
    #[arg(long)]
    pub sandbox: String,
    /// The harness profile (the relay's default: claude-code).
    #[arg(long)]
    pub harness: Option<String>,
    /// What to ask the agent.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<String>,
    /// The agent's directory (default: the sandbox's working directory).
    #[arg(long)]
    pub cwd: Option<String>,
    /// A tool call to hold for a person's approval (a Claude Code permission pattern); repeatable.
    #[arg(long = "approval", value_name = "PATTERN")]
    pub approvals: Vec<String>,
    /// A secret the agent gets as an environment variable; repeatable.
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// The agent CLI is logged in inside the sandbox: start without a credential secret.
    #[arg(long)]
    pub sandbox_login: bool,
    /// The turn's deadline in minutes (the relay's default: 120).
    #[arg(long, value_name = "MINUTES")]
    pub timeout: Option<i64>,
    /// A retry with the same key returns the same session instead of starting another.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct SessionPromptArgs {
    /// The session: its name or id, or a unique prefix of either.
    pub session: String,
    /// The follow-up prompt.
    pub text: String,
    /// The turn's deadline in minutes (the relay's default: 120).
    #[arg(long, value_name = "MINUTES")]
    pub timeout: Option<i64>,
}

#[derive(Debug, Args)]
pub struct SessionArg {
    /// The session: its name or id, or a unique prefix of either.
    pub session: String,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The session: its name or id, or a unique prefix of either.
    pub session: String,
    /// Stay for the session's next turns (reconnecting with Last-Event-ID), until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the events after this seq.
    #[arg(long, value_name = "SEQ")]
    pub since: Option<i64>,
    /// Stop when the turn waits for a person (an approval, a question), exiting 5.
    #[arg(long, conflicts_with = "follow")]
    pub until_input: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, arg_required_else_help = true)]
pub struct JobArgs {
    #[command(subcommand)]
    pub command: Option<JobCmd>,
    /// The job's id: shows its status.
    pub id: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Start a job; prints its id.
    Start(Box<JobStartArgs>),
    /// Cancel a job.
    Cancel(JobArg),
    /// A job's events until it ends, one line each.
    Events(JobArg),
}

#[derive(Debug, Args)]
pub struct JobArg {
    /// The job's id (job_...), or a unique prefix of it (job_3f2a).
    pub id: String,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("prompt_from").required(true).args(["prompt", "prompt_file"])))]
#[command(group(ArgGroup::new("where").required(true).args(["sandbox", "provider"])))]
pub struct JobStartArgs {
    /// An existing sandbox to run in.
    #[arg(long)]
    pub sandbox: Option<String>,
    /// Or a new sandbox of this provider (kept when the job ends).
    #[arg(long)]
    pub provider: Option<String>,
    /// The new sandbox's provider option, KEY=VALUE; repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE", value_parser = parse_option, conflicts_with = "sandbox")]
    pub options: Vec<(String, serde_json::Value)>,
    /// The harness profile (the relay's default: claude-code).
    #[arg(long)]
    pub harness: Option<String>,
    /// What to ask the agent.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<String>,
    /// The agent's directory, where verify and git run too.
    #[arg(long)]
    pub cwd: Option<String>,
    /// A shell command run after the agent succeeded; its exit code decides the job.
    #[arg(long, value_name = "CMD")]
    pub verify: Option<String>,
    /// The agent's turn's deadline in minutes (the relay's default: 120).
    #[arg(long, value_name = "MINUTES")]
    pub timeout: Option<i64>,
    /// A retry with the same key and prompt returns the first job.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// A secret the agent gets as an environment variable; repeatable.
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// The agent CLI is logged in inside the sandbox: start without a credential secret.
    #[arg(long)]
    pub sandbox_login: bool,
}

#[derive(Debug, Args)]
pub struct InboxArgs {
    /// The latest ended items instead of the open ones.
    #[arg(long)]
    pub ended: bool,
}

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The item's id (inb_...) or its approval's (apr_...), or a unique prefix of either.
    pub id: String,
    /// Why (the agent sees a denial's reason).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The item's id (inb_...) or its question's (qst_...), or a unique prefix of either.
    pub id: String,
    /// The answer (1 to 2000 characters).
    pub text: String,
}

#[derive(Debug, Args)]
pub struct ItemArg {
    /// The item's id (inb_...), or a unique prefix of it.
    pub id: String,
}

#[derive(Debug, Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub command: Option<TokensCmd>,
}

#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// List every token, revoked ones too (the default).
    List,
    /// Create a token; its secret is shown this once.
    Create(TokenCreateArgs),
    /// Revoke a token: its streams end and its processes are killed.
    Revoke(TokenArg),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// A name for people (1 to 128 characters).
    pub name: String,
    /// admin, user, mcp or jobs.
    #[arg(long)]
    pub scope: String,
    /// The person behind it (default: the token's name); sessions belong to the person.
    #[arg(long, value_name = "ID")]
    pub person: Option<String>,
    /// The person's display name.
    #[arg(long, value_name = "NAME", requires = "person")]
    pub person_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct TokenArg {
    /// The token's id (tok_...).
    pub id: String,
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Print the table once (from GET /api/fleet) instead of following the stream.
    #[arg(long)]
    pub once: bool,
    /// Only this person's units (`none`: the sandboxes nobody owns).
    #[arg(long, value_name = "PERSON")]
    pub owner: Option<String>,
    /// Include settled (stopped) sandboxes.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

/// `KEY=VALUE`, the value read as JSON when it is JSON (`2048`, `true`, `{"CI": "1"}`), else
/// taken as a string (`hangar-envd:latest`): what a person types for either.
pub fn parse_option(s: &str) -> Result<(String, serde_json::Value), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has no key"));
    }
    let value = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_string()));
    Ok((k.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use serde_json::json;

    #[test]
    fn the_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn options_are_json_when_they_parse_and_strings_otherwise() {
        assert_eq!(parse_option("memory_mb=2048"), Ok(("memory_mb".into(), json!(2048))));
        assert_eq!(parse_option("image=hangar-envd:latest"), Ok(("image".into(), json!("hangar-envd:latest"))));
        assert_eq!(parse_option(r#"env={"CI":"1"}"#), Ok(("env".into(), json!({"CI": "1"}))));
        assert_eq!(parse_option("workdir=/a=b"), Ok(("workdir".into(), json!("/a=b"))));
        assert_eq!(parse_option("empty="), Ok(("empty".into(), json!(""))));
        assert!(parse_option("novalue").is_err());
        assert!(parse_option("=x").is_err());
    }

    #[test]
    fn a_command_after_the_sandbox_keeps_its_own_flags() {
        let cli =
            Cli::try_parse_from(["hangar", "exec", "default", "--cwd", "repo", "--", "ls", "-la"]).expect("parses");
        let Command::Exec(e) = cli.command else { panic!("not exec") };
        assert_eq!(e.cwd.as_deref(), Some("repo"));
        assert_eq!(e.command, ["ls", "-la"]);
        // Without `--` too: everything from the first word of the command on is the command's.
        let cli = Cli::try_parse_from(["hangar", "exec", "default", "grep", "-r", "--cwd", "x"]).expect("parses");
        let Command::Exec(e) = cli.command else { panic!("not exec") };
        assert_eq!(e.cwd, None);
        assert_eq!(e.command, ["grep", "-r", "--cwd", "x"]);
    }

    #[test]
    fn job_takes_an_id_or_a_subcommand() {
        let cli = Cli::try_parse_from(["hangar", "job", "job_0123"]).expect("parses");
        let Command::Job(j) = cli.command else { panic!("not job") };
        assert_eq!(j.id.as_deref(), Some("job_0123"));
        assert!(j.command.is_none());
        let cli = Cli::try_parse_from(["hangar", "job", "cancel", "job_0123"]).expect("parses");
        let Command::Job(j) = cli.command else { panic!("not job") };
        assert!(matches!(j.command, Some(JobCmd::Cancel(JobArg { ref id })) if id == "job_0123"));
        assert!(Cli::try_parse_from(["hangar", "job"]).is_err());
    }

    #[test]
    fn a_session_needs_one_prompt() {
        let base = ["hangar", "session", "start", "s", "--sandbox", "default"];
        assert!(Cli::try_parse_from(base).is_err());
        assert!(Cli::try_parse_from([&base[..], &["--prompt", "a", "--prompt-file", "f"]].concat()).is_err());
        assert!(Cli::try_parse_from([&base[..], &["--prompt", "a"]].concat()).is_ok());
    }

    #[test]
    fn a_job_runs_in_a_sandbox_or_a_new_one() {
        let base = ["hangar", "job", "start", "--prompt", "p"];
        assert!(Cli::try_parse_from(base).is_err());
        assert!(Cli::try_parse_from([&base[..], &["--sandbox", "a", "--provider", "docker"]].concat()).is_err());
        assert!(Cli::try_parse_from([&base[..], &["--sandbox", "a", "--option", "x=1"]].concat()).is_err());
        assert!(Cli::try_parse_from([&base[..], &["--provider", "docker", "--option", "x=1"]].concat()).is_ok());
    }
}
