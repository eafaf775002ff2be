//! E2B's `process.Process` service, with E2B envd's behaviours (docs/envd.md lists every difference).
use std::{collections::HashMap, sync::Arc};

use hangar_proto::process::{
    process_event::{self as pe, DataEvent, EndEvent, KeepAlive, StartEvent},
    process_input,
    process_server::Process as ProcessRpc,
    stream_input_request, CloseStdinRequest, CloseStdinResponse, ConnectRequest, ConnectResponse, ListRequest,
    ListResponse, ProcessConfig, ProcessEvent, ProcessInfo, SendInputRequest, SendInputResponse, SendSignalRequest,
    SendSignalResponse, Signal as E2bSignal, StartRequest, StartResponse, StreamInputRequest, StreamInputResponse,
    UpdateRequest, UpdateResponse,
};
use nix::sys::signal::Signal;
use tonic::{Request, Response, Status, Streaming};

use super::{context, fail, pump, resolve_path, rpc_stream, selector, Core, Pumped, RpcStream};
use crate::{
    error::RpcError,
    events,
    process::{CommandInfo, Event, ExitInfo, Process, SpawnSpec, StartSpec, StreamKind},
    users,
};

/// A PTY requested without a size gets a terminal's usual one.
const DEFAULT_PTY: (u16, u16) = (80, 24);
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct ProcessService {
    core: Arc<Core>,
}

impl ProcessService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    fn find(&self, sel: Option<hangar_proto::process::ProcessSelector>) -> Result<Arc<Process>, RpcError> {
        Ok(self.core.table.get(&selector(sel)?)?)
    }

    fn start_spec(&self, ctx: &super::CallContext, req: StartRequest) -> Result<StartSpec, RpcError> {
        let cfg = req.process.ok_or_else(|| RpcError::invalid_argument("process is required"))?;
        if cfg.cmd.is_empty() {
            return Err(RpcError::invalid_argument("process.cmd is required"));
        }
        if let Some(tag) = &req.tag {
            if tag.is_empty() {
                return Err(RpcError::invalid_argument("tag must not be empty"));
            }
        }
        let defaults = self.core.settings.get();
        let user = ctx.user.clone();
        let cwd = match cfg.cwd.as_deref().filter(|c| !c.is_empty()) {
            Some(c) => {
                let p = resolve_path(c, &user, defaults.workdir.as_deref());
                if !p.is_dir() {
                    return Err(RpcError::invalid_argument(format!("cwd {c:?} is not an existing directory")));
                }
                p
            }
            None => [defaults.workdir.clone(), Some(user.home.clone())]
                .into_iter()
                .flatten()
                .find(|p| p.is_dir())
                .unwrap_or_else(|| "/".into()),
        };
        let mut env: HashMap<String, String> = HashMap::new();
        env.insert("PATH".into(), std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into()));
        env.insert("HOME".into(), user.home.to_string_lossy().into_owned());
        env.insert("USER".into(), user.name.clone());
        env.insert("LOGNAME".into(), user.name.clone());
        env.extend(defaults.env.clone());
        env.extend(cfg.envs.clone());
        let pty = req.pty.map(|p| {
            p.size.map(|s| (clamp_dim(s.cols, DEFAULT_PTY.0), clamp_dim(s.rows, DEFAULT_PTY.1))).unwrap_or(DEFAULT_PTY)
        });
        let switch_user = users::can_switch_users() && user.uid != nix::unistd::Uid::effective().as_raw();
        Ok(StartSpec {
            spawn: SpawnSpec {
                cmd: cfg.cmd.clone(),
                args: cfg.args.clone(),
                env: env.into_iter().collect(),
                cwd,
                user,
                switch_user,
                pty,
                stdin: req.stdin.unwrap_or(true),
            },
            tag: req.tag,
            command: CommandInfo { cmd: cfg.cmd, args: cfg.args, envs: cfg.envs, cwd: cfg.cwd },
        })
    }
}

fn clamp_dim(v: u32, default: u16) -> u16 {
    if v == 0 {
        default
    } else {
        v.min(u32::from(u16::MAX)) as u16
    }
}

pub(crate) fn config_of(p: &Process) -> ProcessConfig {
    ProcessConfig {
        cmd: p.command.cmd.clone(),
        args: p.command.args.clone(),
        envs: p.command.envs.clone(),
        cwd: p.command.cwd.clone(),
    }
}

fn event(e: pe::Event) -> ProcessEvent {
    ProcessEvent { event: Some(e) }
}

fn end_event(exit: &ExitInfo) -> ProcessEvent {
    event(pe::Event::End(EndEvent {
        exit_code: exit.exit_code,
        exited: exit.exited(),
        status: exit.status.clone(),
        error: exit.error.clone(),
    }))
}

/// E2B's process events from a pump: data and end; gaps are not in E2B's vocabulary.
fn e2b_event(pid: u32, item: Pumped) -> Option<Result<ProcessEvent, Status>> {
    match item {
        Pumped::Event(Event::Data(c)) => {
            let output = match c.kind {
                StreamKind::Stdout => pe::data_event::Output::Stdout(c.data),
                StreamKind::Stderr => pe::data_event::Output::Stderr(c.data),
                StreamKind::Pty => pe::data_event::Output::Pty(c.data),
            };
            Some(Ok(event(pe::Event::Data(DataEvent { output: Some(output) }))))
        }
        Pumped::Event(Event::Gap { from, to }) => {
            events::SubscriberGap { pid, lost: to - from }.emit();
            None
        }
        Pumped::Event(Event::End { exit, .. }) => Some(Ok(end_event(&exit))),
        Pumped::KeepAlive => Some(Ok(event(pe::Event::Keepalive(KeepAlive {})))),
        Pumped::Deadline => Some(Err(Status::deadline_exceeded("the call's deadline passed"))),
    }
}

#[tonic::async_trait]
impl ProcessRpc for ProcessService {
    type ConnectStream = RpcStream<ConnectResponse>;
    type StartStream = RpcStream<StartResponse>;

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        context(&req).map_err(|e| fail("process.List", e))?;
        let processes = self
            .core
            .table
            .list()
            .into_iter()
            .filter(|p| p.running())
            .map(|p| ProcessInfo { config: Some(config_of(&p)), pid: p.pid, tag: p.tag.clone() })
            .collect();
        Ok(Response::new(ListResponse { processes }))
    }

    async fn connect(&self, req: Request<ConnectRequest>) -> Result<Response<Self::ConnectStream>, Status> {
        let ctx = context(&req).map_err(|e| fail("process.Connect", e))?;
        let p = self.find(req.into_inner().process).map_err(|e| fail("process.Connect", e))?;
        let (_, next) = p.log.bounds();
        let sub = p.log.subscribe(next, false);
        let pid = p.pid;
        let first = ConnectResponse { event: Some(event(pe::Event::Start(StartEvent { pid }))) };
        Ok(Response::new(rpc_stream(pump(sub, ctx.keepalive, ctx.deadline), Some(first), move |i| {
            e2b_event(pid, i).map(|r| r.map(|e| ConnectResponse { event: Some(e) }))
        })))
    }

    async fn start(&self, req: Request<StartRequest>) -> Result<Response<Self::StartStream>, Status> {
        let ctx = context(&req).map_err(|e| fail("process.Start", e))?;
        let spec = self.start_spec(&ctx, req.into_inner()).map_err(|e| fail("process.Start", e))?;
        let (cmd, pty) = (spec.spawn.cmd.clone(), spec.spawn.pty.is_some());
        let (p, primary) = self.core.table.start(spec).await.map_err(|e| fail("process.Start", e))?;
        events::ProcessStarted { pid: p.pid, tag: p.tag.as_deref(), cmd: &cmd, user: &p.user, pty }.emit();
        if let Some(deadline) = ctx.deadline {
            p.kill_at(deadline);
        }
        let pid = p.pid;
        let first = StartResponse { event: Some(event(pe::Event::Start(StartEvent { pid }))) };
        // The deadline kills the process; the stream then ends with its end event.
        Ok(Response::new(rpc_stream(pump(primary, ctx.keepalive, None), Some(first), move |i| {
            e2b_event(pid, i).map(|r| r.map(|e| StartResponse { event: Some(e) }))
        })))
    }

    async fn update(&self, req: Request<UpdateRequest>) -> Result<Response<UpdateResponse>, Status> {
        let r = req.into_inner();
        let p = self.find(r.process).map_err(|e| fail("process.Update", e))?;
        if !p.is_pty() {
            return Err(fail("process.Update", RpcError::failed_precondition(format!("process {} has no PTY", p.pid))));
        }
        if let Some(size) = r.pty.and_then(|p| p.size) {
            p.resize(clamp_dim(size.cols, DEFAULT_PTY.0), clamp_dim(size.rows, DEFAULT_PTY.1))
                .map_err(|e| fail("process.Update", e))?;
        }
        Ok(Response::new(UpdateResponse {}))
    }

    async fn stream_input(
        &self,
        req: Request<Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        const M: &str = "process.StreamInput";
        let mut stream = req.into_inner();
        let read_err = |s: Status| {
            let e = RpcError::from(s);
            if e.code == tonic::Code::ResourceExhausted {
                e
            } else {
                RpcError::invalid_argument(format!("reading the input stream: {}", e.message))
            }
        };
        let first = stream.message().await.map_err(|s| fail(M, read_err(s)))?;
        let Some(StreamInputRequest { event: Some(stream_input_request::Event::Start(start)) }) = first else {
            return Err(fail(
                M,
                RpcError::invalid_argument("the first message must be a start event naming the process"),
            ));
        };
        let p = self.find(start.process).map_err(|e| fail(M, e))?;
        while let Some(msg) = stream.message().await.map_err(|s| fail(M, read_err(s)))? {
            match msg.event {
                Some(stream_input_request::Event::Data(d)) => {
                    write_input(&p, d.input).await.map_err(|e| fail(M, e))?;
                }
                Some(stream_input_request::Event::Keepalive(_)) | None => {}
                Some(stream_input_request::Event::Start(_)) => {
                    return Err(fail(M, RpcError::invalid_argument("only the first message may be a start event")));
                }
            }
        }
        Ok(Response::new(StreamInputResponse {}))
    }

    async fn send_input(&self, req: Request<SendInputRequest>) -> Result<Response<SendInputResponse>, Status> {
        let r = req.into_inner();
        let p = self.find(r.process).map_err(|e| fail("process.SendInput", e))?;
        write_input(&p, r.input).await.map_err(|e| fail("process.SendInput", e))?;
        Ok(Response::new(SendInputResponse {}))
    }

    async fn send_signal(&self, req: Request<SendSignalRequest>) -> Result<Response<SendSignalResponse>, Status> {
        let r = req.into_inner();
        let sig = match E2bSignal::try_from(r.signal) {
            Ok(E2bSignal::Sigterm) => Signal::SIGTERM,
            Ok(E2bSignal::Sigkill) => Signal::SIGKILL,
            _ => {
                return Err(fail(
                    "process.SendSignal",
                    RpcError::invalid_argument("signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL"),
                ))
            }
        };
        let p = self.find(r.process).map_err(|e| fail("process.SendSignal", e))?;
        p.signal(sig).map_err(|e| fail("process.SendSignal", e))?;
        events::ProcessSignalled { pid: p.pid, signal: sig as i32 }.emit();
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn close_stdin(&self, req: Request<CloseStdinRequest>) -> Result<Response<CloseStdinResponse>, Status> {
        let p = self.find(req.into_inner().process).map_err(|e| fail("process.CloseStdin", e))?;
        p.close_stdin().await.map_err(|e| fail("process.CloseStdin", e))?;
        Ok(Response::new(CloseStdinResponse {}))
    }
}

async fn write_input(p: &Process, input: Option<hangar_proto::process::ProcessInput>) -> Result<(), RpcError> {
    match input.and_then(|i| i.input) {
        Some(process_input::Input::Stdin(b)) => Ok(p.write_stdin(&b).await?),
        Some(process_input::Input::Pty(b)) => Ok(p.write_pty(&b).await?),
        None => Err(RpcError::invalid_argument("input (stdin or pty bytes) is required")),
    }
}
