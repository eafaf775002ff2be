//! Background processes: started through the sandbox's daemon, owned by the token that started
//! them, found again by their envd tag after a relay restart.
//!
//! Ownership is the tag `hangar:<id>:<MAC>`, the MAC of (owner token, sandbox, id) under the
//! relay's key. Every lookup recomputes the caller's tag and selects by it exactly, so another
//! token's process does not exist for the caller, and a tag made up inside the sandbox (which
//! cannot know the key) matches nobody.
use std::{collections::HashSet, sync::Mutex};

use futures::Stream;
use hangar_proto::{
    ext::{
        attach_event, AttachRequest, ListRequest as ExtList, OutputStream, ProcessState, ProcessStatus, SignalRequest,
    },
    process::{
        process_event, process_input, process_selector, CloseStdinRequest, ProcessConfig, ProcessInput,
        ProcessSelector, SendInputRequest, StartRequest,
    },
};
use serde::Serialize;
use tonic::Code;

use crate::{
    auth::{self, Caller, MacKey},
    envd::{daemon_error, Envd},
    error::ApiError,
    store::SandboxRow,
};

const TAG_PREFIX: &str = "hangar:";
/// SIGTERM, then SIGKILL this long after, as the streaming document says.
pub const KILL_GRACE_MS: u32 = 3000;

/// A process id as the relay makes them: `p_` and 12 hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 14 && id.starts_with("p_") && id[2..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

pub fn tag(key: &MacKey, caller: &Caller, sandbox: &SandboxRow, id: &str) -> String {
    format!("{TAG_PREFIX}{id}:{}", key.mac(&[&caller.token_id, &sandbox.id, id]))
}

/// The id in `tag` if the tag is the caller's in this sandbox.
fn owned_id<'t>(key: &MacKey, caller: &Caller, sandbox: &SandboxRow, tag: &'t str) -> Option<&'t str> {
    let (id, mac) = tag.strip_prefix(TAG_PREFIX)?.split_once(':')?;
    (valid_id(id) && key.verify(&[&caller.token_id, &sandbox.id, id], mac)).then_some(id)
}

fn by_tag(tag: String) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(process_selector::Selector::Tag(tag)) })
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessView {
    pub process_id: String,
    pub sandbox: String,
    pub pid: u32,
    pub command: String,
    /// `running` or `exited`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Bytes written so far: where the next byte will be.
    pub output_bytes: u64,
    /// Found again by its tag, not started by this run of the relay.
    pub adopted: bool,
    /// Run without a daemon: detached, its output in a file the relay polls (no input).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub polled: bool,
}

/// A caller's view of one sandbox: whose processes, where, and the daemon to ask.
pub struct At<'a> {
    pub envd: &'a Envd,
    pub key: &'a MacKey,
    pub caller: &'a Caller,
    pub sandbox: &'a SandboxRow,
}

impl At<'_> {
    fn tag(&self, id: &str) -> String {
        tag(self.key, self.caller, self.sandbox, id)
    }
}

/// What the relay remembers of the processes it started in this run (to tell adopted ones).
#[derive(Default)]
pub struct Processes {
    started: Mutex<HashSet<(String, String)>>,
}

impl Processes {
    fn remember(&self, sandbox: &str, id: &str) {
        self.started.lock().unwrap_or_else(|p| p.into_inner()).insert((sandbox.to_string(), id.to_string()));
    }

    fn adopted(&self, sandbox: &str, id: &str) -> bool {
        !self.started.lock().unwrap_or_else(|p| p.into_inner()).contains(&(sandbox.to_string(), id.to_string()))
    }

    fn view(&self, sandbox: &SandboxRow, id: &str, p: &ProcessStatus) -> ProcessView {
        let exit = p.exit.as_ref();
        let command = p.config.as_ref().and_then(|c| c.args.get(1).cloned()).unwrap_or_default();
        ProcessView {
            process_id: id.to_string(),
            sandbox: sandbox.name.clone(),
            pid: p.pid,
            command,
            state: if p.state == ProcessState::Exited as i32 { "exited" } else { "running" },
            exit_code: exit.map(|e| e.exit_code),
            status: exit.map(|e| e.status.clone()),
            started_at: p.started_at.map(|t| t.to_string()),
            ended_at: exit.and_then(|e| e.ended_at).map(|t| t.to_string()),
            output_bytes: p.output_bytes,
            adopted: self.adopted(&sandbox.id, id),
            polled: false,
        }
    }

    /// Everything the daemon lists, running and recently exited, whoever started it.
    async fn all(at: &At<'_>) -> Result<Vec<ProcessStatus>, ApiError> {
        Ok(at
            .envd
            .processes()
            .list(ExtList { running_only: false })
            .await
            .map_err(|s| daemon_error("listing processes", s))?
            .into_inner()
            .processes)
    }

    /// The caller's processes in the sandbox, running and recently exited.
    pub async fn list(&self, at: &At<'_>) -> Result<Vec<ProcessView>, ApiError> {
        Ok(Self::all(at)
            .await?
            .iter()
            .filter_map(|p| {
                let id = owned_id(at.key, at.caller, at.sandbox, p.tag.as_deref()?)?;
                Some(self.view(at.sandbox, id, p))
            })
            .collect())
    }

    pub async fn get(&self, at: &At<'_>, id: &str) -> Result<ProcessView, ApiError> {
        let wanted = at.tag(id);
        Self::all(at)
            .await?
            .iter()
            .filter(|p| p.tag.as_deref() == Some(wanted.as_str()))
            .max_by_key(|p| (p.state == ProcessState::Running as i32, p.started_at.map(|t| (t.seconds, t.nanos))))
            .map(|p| self.view(at.sandbox, id, p))
            .ok_or_else(|| ApiError::not_found(format!("no process {id:?} of yours in sandbox {:?}", at.sandbox.name)))
    }

    /// Starts `command` (bash -lc) and returns as soon as it runs. The relay lets go of the start
    /// stream at once, so only the daemon's ring keeps its output and nothing slows it down.
    pub async fn start(&self, at: &At<'_>, command: &str, cwd: Option<String>) -> Result<ProcessView, ApiError> {
        let id = format!("p_{}", auth::random_hex(6));
        let req = StartRequest {
            process: Some(ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-lc".into(), command.to_string()],
                envs: Default::default(),
                cwd,
            }),
            pty: None,
            tag: Some(at.tag(&id)),
            stdin: Some(true),
        };
        let mut stream =
            at.envd.process().start(req).await.map_err(|s| daemon_error("starting the process", s))?.into_inner();
        let pid = match stream.message().await {
            Ok(Some(m)) => match m.event.and_then(|e| e.event) {
                Some(process_event::Event::Start(s)) => s.pid,
                _ => return Err(ApiError::bad_gateway("the daemon did not report the process's start")),
            },
            Ok(None) => return Err(ApiError::bad_gateway("the daemon ended the start stream at once")),
            Err(s) => return Err(daemon_error("starting the process", s)),
        };
        drop(stream);
        self.remember(&at.sandbox.id, &id);
        Ok(ProcessView {
            process_id: id,
            sandbox: at.sandbox.name.clone(),
            pid,
            command: command.to_string(),
            state: "running",
            exit_code: None,
            status: None,
            started_at: None,
            ended_at: None,
            output_bytes: 0,
            adopted: false,
            polled: false,
        })
    }

    pub async fn input(&self, at: &At<'_>, id: &str, data: Vec<u8>, eof: bool) -> Result<(), ApiError> {
        let t = at.tag(id);
        if !data.is_empty() {
            let req = SendInputRequest {
                process: by_tag(t.clone()),
                input: Some(ProcessInput { input: Some(process_input::Input::Stdin(data)) }),
            };
            at.envd.process().send_input(req).await.map_err(|s| daemon_error("writing input", s))?;
        }
        if eof {
            at.envd
                .process()
                .close_stdin(CloseStdinRequest { process: by_tag(t) })
                .await
                .map_err(|s| daemon_error("closing stdin", s))?;
        }
        Ok(())
    }

    /// SIGTERM to the process group, SIGKILL 3 s later if anyone in it is still alive.
    pub async fn kill(&self, at: &At<'_>, id: &str) -> Result<(), ApiError> {
        let req = SignalRequest {
            process: by_tag(at.tag(id)),
            signal: libc::SIGTERM,
            escalate_after_ms: Some(KILL_GRACE_MS),
        };
        match at.envd.processes().signal(req).await {
            Ok(_) => Ok(()),
            // Exited already (its group is empty): it is as killed as it gets, if it is the caller's.
            Err(s) if s.code() == Code::NotFound => self.get(at, id).await.map(|_| ()),
            Err(s) => Err(daemon_error("signalling the process", s)),
        }
    }

    /// Output from `since` (default: the oldest byte the daemon still keeps), then live output,
    /// then the end.
    pub async fn attach(
        &self,
        at: &At<'_>,
        id: &str,
        since: Option<u64>,
    ) -> Result<impl Stream<Item = Output> + Send + 'static, ApiError> {
        let req = AttachRequest { process: by_tag(at.tag(id)), since };
        let mut stream = at.envd.processes().attach(req).await.map_err(|s| daemon_error("attaching", s))?.into_inner();
        Ok(async_stream::stream! {
            let mut text = OffsetText::default();
            loop {
                let ev = match stream.message().await {
                    Ok(Some(m)) => m.event.and_then(|e| e.event),
                    Ok(None) => { yield Output::Broken("the daemon ended the stream".into()); return; }
                    Err(s) => { yield Output::Broken(s.message().to_string()); return; }
                };
                match ev {
                    Some(attach_event::Event::Start(s)) => {
                        text.at = since.unwrap_or(s.oldest_offset);
                        yield Output::Start { oldest: s.oldest_offset, next: s.next_offset };
                    }
                    Some(attach_event::Event::Data(d)) => {
                        let stream_name = if d.stream == OutputStream::Stderr as i32 { "stderr" } else { "stdout" };
                        if let Some((data, next)) = text.push(d.offset, &d.data) {
                            yield Output::Data { data, stream: stream_name, next };
                        }
                    }
                    Some(attach_event::Event::Gap(g)) => {
                        text = OffsetText { at: g.to, pending: Vec::new() };
                        yield Output::Gap { from: g.from, to: g.to };
                    }
                    Some(attach_event::Event::End(e)) => {
                        if let Some((data, next)) = text.flush() {
                            yield Output::Data { data, stream: "stdout", next };
                        }
                        let exit = e.exit.unwrap_or_default();
                        yield Output::End { exit_code: exit.exit_code, status: exit.status, total: e.total_bytes };
                        return;
                    }
                    Some(attach_event::Event::Keepalive(_)) | None => {}
                }
            }
        })
    }
}

/// What an attach yields, with text cut on character boundaries and offsets that say where to
/// resume.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Start {
        oldest: u64,
        next: u64,
    },
    /// `next` is the offset of the first byte not in `data`: resuming there loses and repeats nothing.
    Data {
        data: String,
        stream: &'static str,
        next: u64,
    },
    Gap {
        from: u64,
        to: u64,
    },
    End {
        exit_code: i32,
        status: String,
        total: u64,
    },
    Broken(String),
}

/// Turns offset-addressed bytes into text without splitting characters: an incomplete character
/// at the end waits for its next bytes, and the resume offset stays before it.
#[derive(Debug, Default)]
pub(crate) struct OffsetText {
    /// Offset of the first byte not yet handed out (including `pending`).
    pub(crate) at: u64,
    pending: Vec<u8>,
}

impl OffsetText {
    pub(crate) fn starting_at(at: u64) -> Self {
        OffsetText { at, pending: Vec::new() }
    }

    pub(crate) fn push(&mut self, offset: u64, data: &[u8]) -> Option<(String, u64)> {
        let end = offset + data.len() as u64;
        let expected = self.at + self.pending.len() as u64;
        // Skip anything already covered (a resume from inside a chunk).
        let skip = expected.saturating_sub(offset).min(data.len() as u64) as usize;
        self.pending.extend_from_slice(&data[skip..]);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Invalid bytes are not text: hand them out replaced, whole.
            Err(_) => self.pending.len(),
        };
        debug_assert!(end >= self.at);
        if valid == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        self.at += valid as u64;
        Some((text, self.at))
    }

    pub(crate) fn flush(&mut self) -> Option<(String, u64)> {
        if self.pending.is_empty() {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.at += self.pending.len() as u64;
        self.pending.clear();
        Some((text, self.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_relays_own_form() {
        assert!(valid_id("p_0123456789ab"));
        assert!(!valid_id("p_0123456789AB"));
        assert!(!valid_id("p_0123"));
        assert!(!valid_id("../../etc/pas"));
    }

    #[test]
    fn text_never_splits_a_character_and_offsets_resume_exactly() {
        let mut t = OffsetText { at: 10, pending: vec![] };
        let euro = "€".as_bytes();
        assert_eq!(t.push(10, b"ab"), Some(("ab".into(), 12)));
        assert_eq!(t.push(12, &euro[..2]), None, "half a character waits");
        assert_eq!(t.push(14, &euro[2..]), Some(("€".into(), 15)));
        // A chunk that starts before what was handed out is trimmed.
        assert_eq!(t.push(13, &[euro[1], euro[2], b'z']), Some(("z".into(), 16)));
    }
}
