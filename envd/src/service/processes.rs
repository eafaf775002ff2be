//! hangar's `hangar.envd.v1.Processes` service: attach with replay, any signal to the group, and a
//! list that keeps exited processes.
use std::{sync::Arc, time::Duration};

use hangar_proto::ext::{
    attach_event::{self as ae, Data, End, Gap, KeepAlive, Start},
    processes_server::Processes,
    AttachEvent, AttachRequest, AttachResponse, ListRequest, ListResponse, OutputStream, ProcessState, ProcessStatus,
    SignalRequest, SignalResponse,
};
use nix::sys::signal::Signal;
use tonic::{Request, Response, Status};

use super::{context, fail, process::config_of, pump, rpc_stream, selector, timestamp, Core, Pumped, RpcStream};
use crate::{
    error::RpcError,
    events,
    process::{Event, ExitInfo, ProcessError, StreamKind},
};

pub struct ProcessesService {
    core: Arc<Core>,
}

impl ProcessesService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

fn exit_msg(e: &ExitInfo) -> hangar_proto::ext::ProcessExit {
    hangar_proto::ext::ProcessExit {
        exit_code: e.exit_code,
        signal: e.signal,
        status: e.status.clone(),
        error: e.error.clone(),
        ended_at: Some(timestamp(e.ended_at)),
    }
}

fn attach_event(e: ae::Event) -> AttachResponse {
    AttachResponse { event: Some(AttachEvent { event: Some(e) }) }
}

#[tonic::async_trait]
impl Processes for ProcessesService {
    type AttachStream = RpcStream<AttachResponse>;

    async fn attach(&self, req: Request<AttachRequest>) -> Result<Response<Self::AttachStream>, Status> {
        const M: &str = "hangar.envd.v1.Processes.Attach";
        let ctx = context(&req).map_err(|e| fail(M, e))?;
        let r = req.into_inner();
        let p = self.core.table.get(&selector(r.process).map_err(|e| fail(M, e))?).map_err(|e| fail(M, e))?;
        let (oldest, next) = p.log.bounds();
        let since = r.since.unwrap_or(oldest);
        if since > next {
            return Err(fail(
                M,
                RpcError::out_of_range(format!("since {since} is past the {next} bytes process {} has written", p.pid)),
            ));
        }
        let sub = p.log.subscribe(since, false);
        let pid = p.pid;
        let first =
            attach_event(ae::Event::Start(Start { pid, tag: p.tag.clone(), oldest_offset: oldest, next_offset: next }));
        Ok(Response::new(rpc_stream(pump(sub, ctx.keepalive, ctx.deadline), Some(first), move |item| {
            Some(match item {
                Pumped::Event(Event::Data(c)) => Ok(attach_event(ae::Event::Data(Data {
                    offset: c.offset,
                    stream: match c.kind {
                        StreamKind::Stdout => OutputStream::Stdout,
                        StreamKind::Stderr => OutputStream::Stderr,
                        StreamKind::Pty => OutputStream::Pty,
                    } as i32,
                    data: c.data,
                }))),
                Pumped::Event(Event::Gap { from, to }) => {
                    events::SubscriberGap { pid, lost: to - from }.emit();
                    Ok(attach_event(ae::Event::Gap(Gap { from, to })))
                }
                Pumped::Event(Event::End { exit, total }) => {
                    Ok(attach_event(ae::Event::End(End { exit: Some(exit_msg(&exit)), total_bytes: total })))
                }
                Pumped::KeepAlive => Ok(attach_event(ae::Event::Keepalive(KeepAlive {}))),
                Pumped::Deadline => Err(Status::deadline_exceeded("the call's deadline passed")),
            })
        })))
    }

    async fn signal(&self, req: Request<SignalRequest>) -> Result<Response<SignalResponse>, Status> {
        const M: &str = "hangar.envd.v1.Processes.Signal";
        let r = req.into_inner();
        let sig = Signal::try_from(r.signal).map_err(|_| fail(M, ProcessError::BadSignal(r.signal)))?;
        let p = self.core.table.get(&selector(r.process).map_err(|e| fail(M, e))?).map_err(|e| fail(M, e))?;
        let grace = r.escalate_after_ms.map(|ms| Duration::from_millis(u64::from(ms)));
        p.signal_escalating(sig, grace).map_err(|e| fail(M, e))?;
        events::ProcessSignalled { pid: p.pid, signal: r.signal }.emit();
        Ok(Response::new(SignalResponse {}))
    }

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let running_only = req.into_inner().running_only;
        let processes = self
            .core
            .table
            .list()
            .into_iter()
            .filter(|p| !running_only || p.running())
            .map(|p| {
                let (oldest, next) = p.log.bounds();
                let exit = p.log.exit();
                ProcessStatus {
                    pid: p.pid,
                    tag: p.tag.clone(),
                    config: Some(config_of(&p)),
                    pty: p.is_pty(),
                    state: if exit.is_some() { ProcessState::Exited } else { ProcessState::Running } as i32,
                    exit: exit.as_ref().map(exit_msg),
                    started_at: Some(timestamp(p.started_at)),
                    output_bytes: next,
                    oldest_offset: oldest,
                    user: p.user.clone(),
                }
            })
            .collect();
        Ok(Response::new(ListResponse { processes }))
    }
}
