//! The one way the relay runs something in a sandbox. A `Runner` is opened on a sandbox: its
//! daemon when it has one, else its provider's exec (`Provider::exec`, the fallback). It runs a
//! script as root or as the agent with a timeout (`script`), or a command through the provider
//! (`fallback`); `start` and `start_tagged` start a program through the daemon, the latter
//! waiting for its pid. Everything that builds a daemon's `Start` does it here (`Program`).
//!
//! Lives with `Sandboxes` because opening a runner is the sandbox's business: its daemon and its
//! provider, which stay private to this folder.
use std::{collections::HashMap, time::Duration};

use hangar_proto::process::{
    process_event::{self, data_event::Output},
    pty, ProcessConfig, Pty, StartRequest, StartResponse,
};
use tonic::{metadata::MetadataValue, Request, Streaming};

use super::{no_such_dir, Sandboxes};
use crate::{
    envd::Envd,
    error::{daemon_error, Error, Result},
    providers::{ExecOutput, ProviderError, EXEC_OUTPUT_BYTES},
    store::SandboxRow,
    text::Tail,
};

/// Who a program runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// Root, where the daemon can act as root (else its default user).
    Root,
    /// The daemon's default user: the agent.
    Agent,
}

impl User {
    /// Root when `root`, else the agent.
    pub fn root_if(root: bool) -> User {
        if root {
            User::Root
        } else {
            User::Agent
        }
    }
}

/// `Authorization: Basic base64("root:")`: envd acts as root when it can.
const AS_ROOT: &str = "Basic cm9vdDo=";

/// A program the daemon starts: `bash` with its arguments.
#[derive(Debug, Clone)]
pub struct Program {
    args: Vec<String>,
    cwd: Option<String>,
    env: HashMap<String, String>,
    tag: Option<String>,
    stdin: bool,
    user: User,
    /// The daemon kills the process group at this deadline.
    deadline: Option<Duration>,
    /// Runs on a terminal of this size (columns, rows) instead of pipes.
    pty: Option<(u32, u32)>,
}

impl Program {
    fn bash(args: Vec<String>, cwd: Option<String>) -> Program {
        Program {
            args,
            cwd,
            env: HashMap::new(),
            tag: None,
            stdin: false,
            user: User::Agent,
            deadline: None,
            pty: None,
        }
    }

    /// A terminal's program in `cwd`: an interactive login shell (`bash -l`), or `argv` run by
    /// one (`bash -lc 'exec "$@"'`), each argument passed as it is and never parsed as shell.
    pub fn terminal(argv: &[String], cwd: Option<String>) -> Program {
        let args = match argv {
            [] => vec!["-l".to_string()],
            argv => ["-lc", "exec \"$@\"", "bash"].into_iter().map(String::from).chain(argv.iter().cloned()).collect(),
        };
        Program::bash(args, cwd)
    }

    /// Runs it on a terminal of `cols` by `rows`.
    pub fn pty(self, cols: u16, rows: u16) -> Program {
        Program { pty: Some((u32::from(cols), u32::from(rows))), ..self }
    }

    /// `bash -c script` in `/`: one of the relay's own scripts.
    pub fn script(script: &str) -> Program {
        Program::bash(vec!["-c".into(), script.to_string()], Some("/".into()))
    }

    /// `bash -lc command` (a login shell, as a client's command runs) in `cwd`, else the
    /// daemon's working directory.
    pub fn command(command: &str, cwd: Option<String>) -> Program {
        Program::bash(vec!["-lc".into(), command.to_string()], cwd)
    }

    /// `bash` running a script file with its arguments (`args[0]` is the file), in `/`.
    pub fn file(args: Vec<String>) -> Program {
        Program::bash(args, Some("/".into()))
    }

    pub fn tag(self, tag: String) -> Program {
        Program { tag: Some(tag), ..self }
    }

    pub fn env(self, env: &[(String, String)]) -> Program {
        Program { env: env.iter().cloned().collect(), ..self }
    }

    /// Leaves its stdin open, for input.
    pub fn stdin(self) -> Program {
        Program { stdin: true, ..self }
    }

    pub fn user(self, user: User) -> Program {
        Program { user, ..self }
    }

    pub fn deadline(self, deadline: Duration) -> Program {
        Program { deadline: Some(deadline), ..self }
    }

    fn request(self) -> Request<StartRequest> {
        let mut req = Request::new(StartRequest {
            process: Some(ProcessConfig { cmd: "/bin/bash".into(), args: self.args, envs: self.env, cwd: self.cwd }),
            pty: self.pty.map(|(cols, rows)| Pty { size: Some(pty::Size { cols, rows }) }),
            tag: self.tag,
            stdin: Some(self.stdin),
        });
        if self.user == User::Root {
            req.metadata_mut().insert("authorization", MetadataValue::from_static(AS_ROOT));
        }
        if let Some(deadline) = self.deadline {
            req.set_timeout(deadline);
        }
        req
    }
}

/// Starts `program` through the daemon: its events from the start. `what` names it in errors
/// ("the command").
pub async fn start(envd: &Envd, program: Program, what: &str) -> Result<Streaming<StartResponse>> {
    let stream = envd.process().start(program.request()).await;
    Ok(stream.map_err(|s| daemon_error(&format!("starting {what}"), s))?.into_inner())
}

/// Starts `program` through the daemon and waits for the daemon to say it runs: its pid and
/// the rest of its events.
pub async fn start_tagged(envd: &Envd, program: Program, what: &str) -> Result<(u32, Streaming<StartResponse>)> {
    let mut stream = start(envd, program, what).await?;
    match stream.message().await {
        Ok(Some(m)) => match m.event.and_then(|e| e.event) {
            Some(process_event::Event::Start(s)) => Ok((s.pid, stream)),
            _ => Err(Error::daemon(format!("the daemon did not report {what}'s start"))),
        },
        Ok(None) => Err(Error::daemon(format!("the daemon ended {what}'s start stream at once"))),
        Err(s) => Err(daemon_error(&format!("starting {what}"), s)),
    }
}

/// A sandbox opened to run things in: through its daemon, or its provider without one.
pub struct Runner<'a> {
    sandboxes: &'a Sandboxes,
    pub row: SandboxRow,
    /// `None`: the sandbox has no daemon, and runs through its provider.
    pub envd: Option<Envd>,
}

impl<'a> Runner<'a> {
    /// Opens the sandbox: its daemon (started again where the provider can) when it has one; a
    /// daemon that fails to start is the error.
    pub async fn open(sandboxes: &'a Sandboxes, mut row: SandboxRow) -> Result<Runner<'a>> {
        let envd = sandboxes.daemon(&mut row).await?;
        Ok(Runner { sandboxes, row, envd })
    }

    /// Opens the sandbox for a client's command, which runs either way: a daemon that fails to
    /// start leaves the provider's exec.
    pub async fn open_any(sandboxes: &'a Sandboxes, mut row: SandboxRow) -> Runner<'a> {
        let envd = sandboxes.daemon(&mut row).await.ok().flatten();
        Runner { sandboxes, row, envd }
    }

    /// The sandbox through its provider alone: one already found without a daemon.
    pub fn provider(sandboxes: &'a Sandboxes, row: SandboxRow) -> Runner<'a> {
        Runner { sandboxes, row, envd: None }
    }

    /// Runs `bash -c script` to its end (or `timeout`, when the output says `timed_out` and
    /// nothing else), as `user` through the daemon; through the provider as the sandbox's user.
    pub async fn script(&self, user: User, script: &str, timeout: Duration) -> Result<ExecOutput> {
        self.script_keeping(user, script, timeout, EXEC_OUTPUT_BYTES).await
    }

    /// `script`, keeping the last `keep` bytes of each output through the daemon (a script that
    /// bounds its own output larger than an exec's, as the diff's); through the provider an
    /// exec's `EXEC_OUTPUT_BYTES` still.
    pub async fn script_keeping(&self, user: User, script: &str, timeout: Duration, keep: usize) -> Result<ExecOutput> {
        let Some(envd) = &self.envd else {
            return self.fallback(script, None, &[], timeout).await;
        };
        let what = "a script";
        let run = async {
            let mut stream = start(envd, Program::script(script).user(user), what).await?;
            let (mut out, mut err) = (Tail::new(keep), Tail::new(EXEC_OUTPUT_BYTES));
            loop {
                let ev = match stream.message().await {
                    Ok(Some(m)) => m.event.and_then(|e| e.event),
                    Ok(None) => return Err(Error::daemon(format!("the daemon ended {what}'s stream early"))),
                    Err(s) => return Err(daemon_error(&format!("running {what}"), s)),
                };
                match ev {
                    Some(process_event::Event::Data(d)) => match d.output {
                        Some(Output::Stdout(b)) => out.push(&b),
                        Some(Output::Stderr(b)) => err.push(&b),
                        _ => {}
                    },
                    Some(process_event::Event::End(e)) => return Ok(ExecOutput::of(e.exit_code, out, err, false)),
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(r) => r,
            Err(_) => Ok(ExecOutput { exit_code: -1, timed_out: true, ..Default::default() }),
        }
    }

    /// The provider's own exec (`bash -lc command`, output in one piece, `env` added), for a
    /// sandbox without a daemon.
    pub async fn fallback(
        &self,
        command: &str,
        cwd: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput> {
        let sandboxes = self.sandboxes;
        sandboxes.runnable(&self.row)?;
        let out = sandboxes.provider(&self.row.provider)?.exec(&self.row, command, cwd, env, timeout).await;
        match out {
            Err(ProviderError::NoSuchDirectory(_)) => Err(no_such_dir(cwd.unwrap_or_default())),
            other => Ok(other?),
        }
    }
}

/// The longest argument Linux passes to a program (`MAX_ARG_STRLEN`, 32 pages): a command is
/// one argument of `bash -lc`.
pub const MAX_COMMAND_BYTES: usize = 32 * 4096 - 1;

/// Refuses a command no kernel would run: empty, with a NUL byte (argv strings end at one), or
/// longer than one argument may be.
pub fn check_command(command: &str) -> Result<()> {
    if command.trim().is_empty() {
        return Err(Error::invalid("command must not be empty"));
    }
    if command.contains('\0') {
        return Err(Error::invalid("command must not contain a NUL byte"));
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(Error::invalid(format!(
            "command is {} bytes: the kernel takes at most {MAX_COMMAND_BYTES} in one argument (write a script to a file instead)",
            command.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// What this module keeps true: nothing else in the relay starts a program in a sandbox. A
    /// daemon's `Start` is built only here (its `ProcessConfig`), and a provider's exec is called
    /// only here (the providers themselves aside).
    #[test]
    fn nothing_else_runs_a_program_in_a_sandbox() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut found = Vec::new();
        for file in files {
            let name = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            if name == "sandboxes/run.rs" || name.starts_with("providers/") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            found.extend(
                ["ProcessConfig {", ".exec(&"].iter().filter(|w| text.contains(*w)).map(|w| format!("{name}: {w}")),
            );
        }
        assert!(found.is_empty(), "programs started outside sandboxes::run: {found:?}");
    }
}
