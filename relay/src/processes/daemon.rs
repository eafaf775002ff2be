//! Background processes through the sandbox's daemon, owned by MAC'd tags, found again by
//! their tag after a relay restart.
//!
//! Ownership is the tag `hangar:<id>:<MAC>`, the MAC of (owner token, sandbox, id) under the
//! relay's key. Every lookup recomputes the caller's tag and selects by it exactly, so another
//! token's process does not exist for the caller, and a tag made up inside the sandbox (which
//! cannot know the key) matches nobody.
use std::{collections::HashMap, sync::Arc};

use futures::Stream;
use hangar_proto::{
    ext::{attach_event, AttachRequest, ListRequest as ExtList, OutputStream as Which, ProcessStatus, SignalRequest},
    process::{process_input, process_selector, CloseStdinRequest, ProcessInput, ProcessSelector, SendInputRequest},
};
use tonic::Code;

use super::{
    output::{Output, OutputStream, ShedOldest},
    valid_id, Backend, Items, ProcessState, ProcessView, Processes, KILL_GRACE_MS,
};
use crate::{
    auth::{Caller, MacKey},
    envd::Envd,
    error::{daemon_error, Error, Result},
    sandboxes::run::{self, Program},
    store::SandboxRow,
    streams::{
        buffer::{Buffer, Full},
        Reason,
    },
    text::{Encoding, OffsetText},
    time,
};

const TAG_PREFIX: &str = "hangar:";
pub fn tag(key: &MacKey, caller: &Caller, sandbox: &SandboxRow, id: &str) -> String {
    format!("{TAG_PREFIX}{id}:{}", key.mac(&[&caller.token_id, &sandbox.id, id]))
}

/// The id in `tag` if the tag is the caller's in this sandbox.
pub(super) fn owned_id<'t>(key: &MacKey, caller: &Caller, sandbox: &SandboxRow, tag: &'t str) -> Option<&'t str> {
    let (id, mac) = tag.strip_prefix(TAG_PREFIX)?.split_once(':')?;
    (valid_id(id) && key.verify(&[&caller.token_id, &sandbox.id, id], mac)).then_some(id)
}

fn by_tag(tag: String) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(process_selector::Selector::Tag(tag)) })
}

/// A caller's processes in one sandbox whose daemon is hangar-envd: whose processes, where, and
/// the daemon to ask (its ring keeps their output).
pub struct DaemonProcesses<'a> {
    pub envd: &'a Envd,
    pub key: &'a MacKey,
    pub caller: &'a Caller,
    pub sandbox: &'a SandboxRow,
    /// The pid each process of this sandbox had when the relay started it. A tag is visible
    /// inside the sandbox and its process may have exited: a process started later with the same
    /// tag (through the daemon directly) is not the one the relay started, and so nobody's.
    pub started: &'a HashMap<String, u32>,
    /// What this run of the relay started: the rest is adopted.
    pub processes: &'a Processes,
    /// How far a reader may fall behind the daemon's stream (`HANGAR_STREAM_BUFFER_BYTES`).
    pub buffer_bytes: usize,
}

impl DaemonProcesses<'_> {
    /// Whether the process with `pid` listed under `id`'s tag is the one the relay started
    /// (processes started before the relay recorded pids are taken on their tag).
    fn is_started(&self, id: &str, pid: u32) -> bool {
        self.started.get(id).is_none_or(|p| *p == pid)
    }

    /// How to select `id` in the daemon: by the pid the relay started it with, else its tag.
    fn select(&self, id: &str) -> Option<ProcessSelector> {
        match self.started.get(id) {
            Some(pid) => Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(*pid)) }),
            None => by_tag(self.tag(id)),
        }
    }

    fn tag(&self, id: &str) -> String {
        tag(self.key, self.caller, self.sandbox, id)
    }

    /// The daemon's refusal of a call that selected process `id` by its tag. The daemon's
    /// message may quote the selector, whose MAC is never shown: it says the id instead, and a
    /// process the daemon does not know is simply not the caller's.
    fn refused(&self, what: &str, id: &str, s: tonic::Status) -> Error {
        if s.code() == Code::NotFound {
            return super::not_yours(id, &self.sandbox.name);
        }
        let message = s.message().replace(&self.tag(id), id);
        daemon_error(what, tonic::Status::new(s.code(), message))
    }

    fn view(&self, id: &str, p: &ProcessStatus, adopted: bool) -> ProcessView {
        let exit = p.exit.as_ref();
        let command = p.config.as_ref().and_then(|c| c.args.get(1).cloned()).unwrap_or_default();
        let exited = p.state == hangar_proto::ext::ProcessState::Exited as i32;
        ProcessView {
            process_id: id.to_string(),
            sandbox: self.sandbox.name.clone(),
            pid: p.pid,
            command,
            state: if exited { ProcessState::Exited } else { ProcessState::Running },
            exit_code: exit.map(|e| e.exit_code),
            status: exit.map(|e| e.status.clone()),
            started_at: p.started_at.as_ref().map(time::of_timestamp),
            ended_at: exit.and_then(|e| e.ended_at.as_ref()).map(time::of_timestamp),
            output_bytes: p.output_bytes,
            adopted,
            polled: false,
            earlier_output: None,
        }
    }

    /// Everything the daemon lists, running and recently exited, whoever started it.
    async fn all(&self) -> Result<Vec<ProcessStatus>> {
        Ok(self
            .envd
            .processes()
            .list(ExtList { running_only: false })
            .await
            .map_err(|s| daemon_error("listing processes", s))?
            .into_inner()
            .processes)
    }

    fn adopted(&self, id: &str) -> bool {
        self.processes.adopted(&self.sandbox.id, id)
    }

    /// The caller's process `id`, said `adopted` or not.
    async fn find(&self, id: &str, adopted: bool) -> Result<ProcessView> {
        let wanted = self.tag(id);
        let running = hangar_proto::ext::ProcessState::Running as i32;
        self.all()
            .await?
            .iter()
            .filter(|p| p.tag.as_deref() == Some(wanted.as_str()) && self.is_started(id, p.pid))
            .max_by_key(|p| (p.state == running, p.started_at.map(|t| (t.seconds, t.nanos))))
            .map(|p| self.view(id, p, adopted))
            .ok_or_else(|| super::not_yours(id, &self.sandbox.name))
    }

    /// Output from `since` (default: the oldest byte the daemon still keeps), then live output,
    /// then the end.
    async fn attach(
        &self,
        id: &str,
        since: Option<u64>,
        encoding: Encoding,
    ) -> Result<impl Stream<Item = Output> + Send + 'static> {
        let at = self;
        at.find(id, false).await?;
        let req = AttachRequest { process: at.select(id), since };
        let mut stream =
            at.envd.processes().attach(req).await.map_err(|s| at.refused("attaching", id, s))?.into_inner();
        Ok(async_stream::stream! {
            let mut text = OffsetText::encoded(0, encoding);
            let broken = |m: &str| Output::Closed { reason: Reason::Error, message: Some(m.to_string()) };
            loop {
                let ev = match stream.message().await {
                    Ok(Some(m)) => m.event.and_then(|e| e.event),
                    Ok(None) => { yield broken("the daemon ended the stream"); return; }
                    Err(s) => { yield broken(s.message()); return; }
                };
                match ev {
                    Some(attach_event::Event::Start(s)) => {
                        text.restart_at(since.unwrap_or(s.oldest_offset));
                        yield Output::Start { oldest: s.oldest_offset, next: s.next_offset };
                    }
                    Some(attach_event::Event::Data(d)) => {
                        let stream = if d.stream == Which::Stderr as i32 { OutputStream::Stderr } else { OutputStream::Stdout };
                        if let Some((data, next)) = text.push(d.offset, &d.data) {
                            yield Output::Data { data, stream, next };
                        }
                    }
                    Some(attach_event::Event::Gap(g)) => {
                        text.restart_at(g.to);
                        yield Output::Gap { from: g.from, to: g.to };
                    }
                    Some(attach_event::Event::End(e)) => {
                        if let Some((data, next)) = text.flush() {
                            yield Output::Data { data, stream: OutputStream::Stdout, next };
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

/// Starts `command` (`bash -lc`, stdin open) under `tag` with E2B's `Start`, and waits for the
/// daemon to say it runs: its pid and the rest of its stream. Both backends that start through
/// a daemon (this one, which lets go of the stream, and `followed`, which reads it) call it.
pub(super) async fn start_tagged(
    envd: &Envd,
    command: &str,
    cwd: Option<String>,
    tag: String,
) -> Result<(u32, tonic::Streaming<hangar_proto::process::StartResponse>)> {
    run::start_tagged(envd, Program::command(command, cwd).tag(tag).stdin(), "the process").await
}

#[tonic::async_trait]
impl Backend for DaemonProcesses<'_> {
    /// The caller's processes in the sandbox, running and recently exited; `adopted` says
    /// which of them this run of the relay did not start.
    async fn list(&self) -> Result<Vec<ProcessView>> {
        Ok(self
            .all()
            .await?
            .iter()
            .filter_map(|p| {
                let id = owned_id(self.key, self.caller, self.sandbox, p.tag.as_deref()?)?;
                self.is_started(id, p.pid).then(|| self.view(id, p, self.adopted(id)))
            })
            .collect())
    }

    async fn get(&self, id: &str) -> Result<ProcessView> {
        self.find(id, self.adopted(id)).await
    }

    /// Starts `command` (bash -lc) and returns as soon as it runs. The relay lets go of the start
    /// stream at once, so only the daemon's ring keeps its output and nothing slows it down.
    async fn start(&self, id: String, command: &str, cwd: Option<String>) -> Result<ProcessView> {
        let at = self;
        let started_at = time::now();
        let (pid, stream) = start_tagged(at.envd, command, cwd, at.tag(&id)).await?;
        drop(stream);
        Ok(ProcessView {
            process_id: id,
            sandbox: at.sandbox.name.clone(),
            pid,
            command: command.to_string(),
            state: ProcessState::Running,
            exit_code: None,
            status: None,
            started_at: Some(started_at),
            ended_at: None,
            output_bytes: 0,
            adopted: false,
            polled: false,
            earlier_output: None,
        })
    }

    async fn input(&self, id: &str, data: Vec<u8>, eof: bool) -> Result<()> {
        let at = self;
        // Ownership first: a process with the tag that the relay did not start is nobody's.
        at.find(id, false).await?;
        if !data.is_empty() {
            let req = SendInputRequest {
                process: at.select(id),
                input: Some(ProcessInput { input: Some(process_input::Input::Stdin(data)) }),
            };
            at.envd.process().send_input(req).await.map_err(|s| at.refused("writing input", id, s))?;
        }
        if eof {
            at.envd
                .process()
                .close_stdin(CloseStdinRequest { process: at.select(id) })
                .await
                .map_err(|s| at.refused("closing stdin", id, s))?;
        }
        Ok(())
    }

    /// SIGTERM to the process group, SIGKILL 3 s later if anyone in it is still alive.
    async fn kill(&self, id: &str) -> Result<()> {
        let at = self;
        at.find(id, false).await?;
        let req =
            SignalRequest { process: at.select(id), signal: libc::SIGTERM, escalate_after_ms: Some(KILL_GRACE_MS) };
        match at.envd.processes().signal(req).await {
            Ok(_) => Ok(()),
            // Exited already (its group is empty): it is as killed as it gets, if it is the caller's.
            Err(s) if s.code() == Code::NotFound => self.find(id, false).await.map(|_| ()),
            Err(s) => Err(at.refused("signalling the process", id, s)),
        }
    }

    async fn follow(
        &self,
        _: &Arc<super::Processes>,
        id: &str,
        since: Option<u64>,
        encoding: Encoding,
    ) -> Result<Items> {
        let items = self.attach(id, since, encoding).await?;
        // Drained as the daemon sends it, whatever the reader's pace: a reader that stops must
        // not hold the sandbox's shared connection (streams::buffer).
        let items = Buffer::spawn(items, ShedOldest::new(since), self.buffer_bytes, Full::Shed);
        Ok(Box::pin(items.into_stream()))
    }
}
