//! Terminals: a program on a PTY in a sandbox, through its daemon (E2B's `process.Process`:
//! `Start` with a `pty`, `SendInput` of pty bytes, `Update` of its size), run as the sandbox's
//! agent user (the daemon's default user, as a client's command runs) in the sandbox's working
//! directory. The REST WebSocket (`GET /api/sandboxes/{ref}/terminal`) serves it.
//!
//! A terminal is a stream like every other: entered through `Sandboxes::enter`, admitted by
//! `Streams::open` (counted, limited, paced and capped on its output's bytes, ended by revocation,
//! pause, destroy, shutdown and its lifetime). Its process is the terminal's alone: dropping the
//! `Terminal` (its client went, the stream was closed) kills it, and its exit ends the terminal.
use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use hangar_proto::process::{
    process_event::{self, data_event::Output},
    process_input, process_selector, pty, ProcessInput, ProcessSelector, Pty, SendInputRequest, StartResponse,
    UpdateRequest,
};
use tokio::time::Instant;

use crate::{
    auth::Caller,
    envd::Envd,
    error::{daemon_error, Error, Result},
    sandboxes::{
        run::{self, Program, MAX_COMMAND_BYTES},
        Sandboxes,
    },
    streams::{self, Front, Kind, Reason, Streams},
};

/// The largest terminal either way, in columns or rows: more is a mistake, not a screen.
pub const MAX_DIMENSION: u16 = 1000;
/// A terminal's size when its client says none.
pub const DEFAULT_SIZE: Size = Size { cols: 80, rows: 24 };
/// The terminal type the program is told it runs on (xterm.js and the CLI's host terminals).
const TERM: &str = "xterm-256color";

/// A terminal's size in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct Size {
    pub cols: u16,
    pub rows: u16,
}

impl Size {
    /// Refuses a size no terminal has: zero, or more than `MAX_DIMENSION` either way.
    pub fn check(self) -> Result<Size> {
        let ok = |n: u16| (1..=MAX_DIMENSION).contains(&n);
        if ok(self.cols) && ok(self.rows) {
            Ok(self)
        } else {
            Err(Error::invalid(format!(
                "a terminal is 1 to {MAX_DIMENSION} columns and rows: {} by {} is not",
                self.cols, self.rows
            )))
        }
    }
}

/// Refuses a program no kernel would run: an empty or NUL-holding first word, a NUL in any
/// argument, or more bytes than one `bash -lc` argument may hold.
pub fn check_argv(argv: &[String]) -> Result<()> {
    if argv.first().is_some_and(|a| a.trim().is_empty()) {
        return Err(Error::invalid("the command's first word must not be empty"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(Error::invalid("the command must not contain a NUL byte"));
    }
    let total: usize = argv.iter().map(|a| a.len() + 1).sum();
    if total > MAX_COMMAND_BYTES {
        return Err(Error::invalid(format!("the command is {total} bytes: at most {MAX_COMMAND_BYTES}")));
    }
    Ok(())
}

/// What a terminal says next.
#[derive(Debug)]
pub enum Event {
    /// Bytes its program wrote to the terminal.
    Output(Bytes),
    /// Its program ended with this code (the last event).
    Exit(i32),
    /// It was ended from outside, or broke (the last event).
    Closed { reason: Reason, message: Option<String> },
}

/// An open terminal: its program's pid in the daemon, the daemon's stream of its output, and the
/// admitted stream its output is charged to.
pub struct Terminal {
    envd: Envd,
    pid: u32,
    output: tonic::Streaming<StartResponse>,
    admitted: streams::Stream,
    /// Output read from the daemon and charged, waiting for its pace: kept here so that `next`
    /// can be dropped while it waits without losing it.
    pending: Option<(Bytes, Instant)>,
    /// The program ended (or was never to be killed again).
    ended: bool,
}

/// Opens a terminal in the sandbox `reference` for `caller`: `argv` run by a login shell, or
/// the login shell itself (`argv` empty), on a PTY of `size`. Needs the sandbox's daemon.
pub async fn open(
    sandboxes: &Sandboxes,
    streams: &Arc<Streams>,
    caller: &Caller,
    reference: &str,
    argv: &[String],
    size: Size,
    front: Front,
) -> Result<Terminal> {
    let size = size.check()?;
    check_argv(argv)?;
    let mut row = sandboxes.enter(reference, caller).await?;
    let envd = sandboxes.require_daemon(&mut row, "a terminal").await?;
    let mut admitted = streams.open(caller, &row.id, Kind::Terminal, front)?;
    let program =
        Program::terminal(argv, None).pty(size.cols, size.rows).env(&[("TERM".to_string(), TERM.to_string())]);
    let (pid, output) = match run::start_tagged(&envd, program, "the terminal").await {
        Ok(started) => started,
        Err(e) => {
            admitted.end(Reason::Error);
            return Err(e);
        }
    };
    tracing::info!(parent: admitted.span(), pid, "terminal opened");
    Ok(Terminal { envd, pid, output, admitted, pending: None, ended: false })
}

impl Terminal {
    fn selector(&self) -> Option<ProcessSelector> {
        Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(self.pid)) })
    }

    /// The next event. Cancel-safe: output read from the daemon is kept until it is returned.
    pub async fn next(&mut self) -> Event {
        loop {
            if let Some((_, at)) = &self.pending {
                let at = *at;
                tokio::select! {
                    biased;
                    reason = self.admitted.closed() => return self.close(reason, None),
                    _ = tokio::time::sleep_until(at) => {}
                }
                if let Some((data, _)) = self.pending.take() {
                    return Event::Output(data);
                }
            }
            // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
            let message = tokio::select! {
                biased;
                reason = self.admitted.closed() => return self.close(reason, None),
                m = self.output.message() => m,
            };
            let event = match message {
                Ok(Some(m)) => m.event.and_then(|e| e.event),
                Ok(None) => return self.close(Reason::Error, Some("the daemon ended the terminal's stream".into())),
                Err(s) => return self.close(Reason::Error, Some(s.message().to_string())),
            };
            match event {
                Some(process_event::Event::Data(d)) => {
                    let Some(Output::Pty(data)) = d.output else { continue };
                    match self.admitted.charge(data.len() as u64) {
                        Ok(wait) if wait.is_zero() => return Event::Output(data),
                        Ok(wait) => self.pending = Some((data, Instant::now() + wait)),
                        Err(reason) => return self.close(reason, None),
                    }
                }
                Some(process_event::Event::End(e)) => {
                    self.ended = true;
                    self.admitted.end(Reason::Done);
                    return Event::Exit(e.exit_code);
                }
                _ => {}
            }
        }
    }

    /// Ends the terminal for `reason` (its program is killed when it is dropped).
    fn close(&mut self, reason: Reason, message: Option<String>) -> Event {
        self.admitted.end(reason);
        Event::Closed { reason, message }
    }

    /// Types `data` into the terminal.
    pub async fn input(&self, data: Vec<u8>) -> Result<()> {
        let input = Some(ProcessInput { input: Some(process_input::Input::Pty(data)) });
        let req = SendInputRequest { process: self.selector(), input };
        self.envd.process().send_input(req).await.map_err(|s| daemon_error("typing into the terminal", s))?;
        Ok(())
    }

    /// Resizes the terminal (its program gets SIGWINCH).
    pub async fn resize(&self, size: Size) -> Result<()> {
        let size = size.check()?;
        let pty = Some(Pty { size: Some(pty::Size { cols: size.cols.into(), rows: size.rows.into() }) });
        let req = UpdateRequest { process: self.selector(), pty };
        self.envd.process().update(req).await.map_err(|s| daemon_error("resizing the terminal", s))?;
        Ok(())
    }
}

/// How long the kill of a terminal's program may take before it is left to the daemon.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

impl Drop for Terminal {
    /// A terminal whose client went or which was closed takes its program (and everything it
    /// started) with it: a PTY nobody reads is of no use and would hold the sandbox.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let (envd, pid) = (self.envd.clone(), self.pid);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Ok(Err(s)) = tokio::time::timeout(KILL_TIMEOUT, envd.kill_pid(pid)).await {
                    tracing::warn!(pid, error = %s.message(), "killing a terminal's program failed");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_commands_no_terminal_could_run_are_refused() {
        assert!(Size { cols: 80, rows: 24 }.check().is_ok());
        assert!(Size { cols: 0, rows: 24 }.check().is_err());
        assert!(Size { cols: 80, rows: MAX_DIMENSION + 1 }.check().is_err());
        assert!(check_argv(&[]).is_ok());
        assert!(check_argv(&["ls".into(), "-la".into()]).is_ok());
        assert!(check_argv(&[" ".into()]).is_err());
        assert!(check_argv(&["echo".into(), "a\0b".into()]).is_err());
        assert!(check_argv(&["x".repeat(MAX_COMMAND_BYTES)]).is_err());
    }
}
