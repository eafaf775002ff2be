//! The `hangar` command-line client under test, run as a person at a terminal would run it: the
//! real binary, with `HANGAR_URL` and `HANGAR_TOKEN` in its environment, its stdout, stderr and
//! exit code read whole (`Hangar::run`) or line by line while it runs (`Hangar::spawn`).
use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::mpsc,
};

use crate::{envd_bin, relay::Relay, within};

/// The `hangar` binary: `HANGAR_CLI_BIN`, else beside the other debug binaries.
pub fn cli_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_CLI_BIN") {
        return PathBuf::from(p);
    }
    envd_bin().with_file_name("hangar")
}

/// How to run `hangar` against one relay with one token.
#[derive(Clone, Debug)]
pub struct Hangar {
    pub url: String,
    pub token: Option<String>,
}

/// A finished run.
#[derive(Debug)]
pub struct Run {
    /// `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Fails the test unless it exited 0; itself, for chaining.
    pub fn ok(self) -> Run {
        assert_eq!(self.code, Some(0), "hangar failed: {self:?}");
        self
    }

    /// Stdout as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:?}"))
    }

    /// Stdout as JSON lines.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a line is not JSON ({e}): {l:?} in {self:?}")))
            .collect()
    }
}

impl Hangar {
    pub fn new(relay: &Relay, token: &str) -> Hangar {
        Hangar { url: format!("http://{}", relay.addr), token: Some(token.to_string()) }
    }

    /// The same relay, another token (`None`: no token at all).
    pub fn with_token(&self, token: Option<&str>) -> Hangar {
        Hangar { url: self.url.clone(), token: token.map(str::to_string) }
    }

    fn command(&self, args: &[&str]) -> Command {
        let bin = cli_bin();
        assert!(
            bin.exists(),
            "{} is missing: build it first (`cargo build -p hangar-cli`, or `cargo build --workspace --bins`)",
            bin.display()
        );
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_remove("HANGAR_TOKEN")
            .env("HANGAR_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(t) = &self.token {
            cmd.env("HANGAR_TOKEN", t);
        }
        cmd
    }

    /// Runs `hangar ARGS` to its end (within `limit`).
    pub async fn run_within(&self, limit: Duration, args: &[&str]) -> Run {
        let out = within(limit, &format!("hangar {}", args.join(" ")), self.command(args).output())
            .await
            .unwrap_or_else(|e| panic!("running hangar: {e}"));
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        self.run_within(crate::STEP, args).await
    }

    /// Starts `hangar ARGS`, its output read line by line as it comes.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self.command(args).spawn().unwrap_or_else(|e| panic!("starting hangar: {e}"));
        let out = lines(child.stdout.take().expect("stdout"));
        let err = lines(child.stderr.take().expect("stderr"));
        Running { child, out, err, stdout: Vec::new(), stderr: Vec::new(), what: args.join(" ") }
    }
}

fn lines(r: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// A `hangar` that is still running.
pub struct Running {
    pub child: Child,
    out: mpsc::UnboundedReceiver<String>,
    err: mpsc::UnboundedReceiver<String>,
    /// Every line read so far.
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    what: String,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id().map_or(0, |p| p as i32)
    }

    /// Reads stdout until a line matches; that line.
    pub async fn stdout_until(&mut self, limit: Duration, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let work = async {
            while let Some(l) = self.out.recv().await {
                self.stdout.push(l.clone());
                if pred(&l) {
                    return Some(l);
                }
            }
            None
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Some(l)) => l,
            r => {
                self.drain_stderr();
                panic!(
                    "hangar {}: no stdout line {what} ({}); stdout:\n{}\nstderr:\n{}",
                    self.what,
                    if r.is_err() { format!("timed out after {limit:?}") } else { "it ended".into() },
                    self.stdout.join("\n"),
                    self.stderr.join("\n")
                )
            }
        }
    }

    /// Reads stderr until a line matches; that line.
    pub async fn stderr_until(&mut self, limit: Duration, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let work = async {
            while let Some(l) = self.err.recv().await {
                self.stderr.push(l.clone());
                if pred(&l) {
                    return Some(l);
                }
            }
            None
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Some(l)) => l,
            _ => panic!("hangar {}: no stderr line {what}; stderr:\n{}", self.what, self.stderr.join("\n")),
        }
    }

    fn drain_stderr(&mut self) {
        while let Ok(l) = self.err.try_recv() {
            self.stderr.push(l);
        }
    }

    /// Sends a signal (SIGINT: Ctrl-C).
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Waits for the end (within `limit`); the whole run, with every line not read yet.
    pub async fn finish(mut self, limit: Duration) -> Run {
        let status = within(limit, &format!("hangar {} to exit", self.what), self.child.wait())
            .await
            .expect("waiting for hangar");
        // The readers end at the pipes' end, which the exit brings.
        while let Some(l) = within(limit, "the rest of stdout", self.out.recv()).await {
            self.stdout.push(l);
        }
        while let Some(l) = within(limit, "the rest of stderr", self.err.recv()).await {
            self.stderr.push(l);
        }
        let join = |v: &[String]| v.iter().map(|l| format!("{l}\n")).collect::<String>();
        Run { code: status.code(), stdout: join(&self.stdout), stderr: join(&self.stderr) }
    }
}
