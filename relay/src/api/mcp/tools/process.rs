//! The `process` tool: background processes (start, attach, input, kill, list), owned by the
//! token that started them, through the same domain calls as the REST routes.
use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use rmcp::{
    model::{JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shape::Shape;
use crate::{
    api::rest::inputs::StartBody,
    auth::Caller,
    error::{Error, Result},
    handles::Relay,
    processes::{self, ProcessState, ProcessView, Read},
    streams::{Front, Reason},
    text::Encoding,
};

/// The longest an attach waits for more output.
pub const MAX_WAIT_SECONDS: u64 = 600;
/// How much output an attach's result keeps (the progress notifications had all of it).
pub const ATTACH_TAIL_BYTES: usize = 64 * 1024;

/// The `process` tool's arguments, one shape per action; its schema is derived (`Shape`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "lowercase")]
pub(super) enum Args {
    Start {
        #[serde(flatten)]
        at: In,
        #[serde(flatten)]
        body: StartBody,
    },
    Attach {
        #[serde(flatten)]
        of: Process,
        /// Output offset (a previous attach's next)
        since: Option<u64>,
        /// Seconds to wait for more output (default 0)
        #[schemars(range(max = MAX_WAIT_SECONDS))]
        wait_seconds: Option<u64>,
        /// Text (default; bytes that are not UTF-8 become U+FFFD) or base64 of the exact bytes
        #[serde(default)]
        encoding: Encoding,
    },
    Input {
        #[serde(flatten)]
        of: Process,
        /// Written to its stdin
        input: Option<String>,
        /// Close its stdin after the input
        #[serde(default)]
        eof: bool,
    },
    Kill(Process),
    List(In),
}

/// The process an action is about.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Process {
    #[serde(flatten)]
    at: In,
    /// The process's id (start's process_id)
    process_id: String,
}

/// The sandbox a call works in (here and in `exec`).
#[derive(Deserialize, JsonSchema)]
pub(super) struct In {
    /// Sandbox name or id
    pub sandbox: String,
}

/// The `process` tool's result, by action (untagged: each is an object of its own fields).
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum Reply {
    /// start
    Started { process_id: String, process: ProcessView },
    /// list
    Listed { processes: Vec<ProcessView> },
    /// kill
    Killed { process_id: String, killed: bool },
    /// input
    Written {
        process_id: String,
        /// Whether its stdin was closed
        eof: bool,
    },
    /// attach
    Attached(Attached),
}

/// What an attach read: the tail of the output, and where to read on from.
#[derive(Serialize, JsonSchema)]
pub(super) struct Attached {
    process_id: String,
    state: ProcessState,
    /// Its exit code, once it exited
    exit_code: Option<i32>,
    /// The last 64 KiB read (all of it came as progress notifications), in `encoding`
    output: String,
    encoding: Encoding,
    /// Where the output read starts
    since: u64,
    /// Pass as since next time
    next: u64,
    /// Bytes no longer kept
    lost: u64,
    /// "lost": what it wrote before the relay found it again is gone
    earlier_output: Option<&'static str>,
    /// Why the relay ended the read early
    closed: Option<Reason>,
}

impl super::Reply for Reply {
    fn sandbox_output(&self) -> &'static [&'static str] {
        match self {
            Reply::Attached(_) => &["output"],
            _ => &[],
        }
    }
}

// An argument of another action is ignored, as it always was here (the other tools refuse it).
pub(super) static SHAPE: LazyLock<Shape<Args>> = LazyLock::new(|| Shape::new("process", false));

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    raw: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<Reply> {
    match SHAPE.read(raw)? {
        Args::Start { at, body } => {
            let view = processes::start(&relay.processes, caller, &at.sandbox, &body.command, body.cwd).await?;
            Ok(Reply::Started { process_id: view.process_id.clone(), process: view })
        }
        Args::List(at) => {
            Ok(Reply::Listed { processes: processes::list(&relay.processes, caller, &at.sandbox).await? })
        }
        Args::Kill(of) => {
            processes::kill(&relay.processes, caller, &of.at.sandbox, &of.process_id).await?;
            Ok(Reply::Killed { process_id: of.process_id, killed: true })
        }
        Args::Input { of, input, eof } => {
            processes::input(
                &relay.processes,
                caller,
                &of.at.sandbox,
                &of.process_id,
                input.unwrap_or_default().into_bytes(),
                eof,
            )
            .await?;
            Ok(Reply::Written { process_id: of.process_id, eof })
        }
        Args::Attach { of, since, wait_seconds, encoding } => {
            let wait = wait_seconds.unwrap_or(0);
            if wait > MAX_WAIT_SECONDS {
                return Err(Error::invalid(format!("wait_seconds: 0 to {MAX_WAIT_SECONDS}")));
            }
            let how = Read {
                since,
                encoding,
                wait: Duration::from_secs(wait),
                tail: ATTACH_TAIL_BYTES,
                admit: Some(Front::Mcp),
            };
            attach(relay, caller, &of.at.sandbox, &of.process_id, how, ctx).await
        }
    }
}

/// Output from `since`, then what comes during `wait`, each chunk a progress notification when
/// the call has a progress token; the result has the tail, the state, the exit code and `next`.
async fn attach(
    relay: &Arc<Relay>,
    caller: &Caller,
    sandbox: &str,
    id: &str,
    how: Read,
    ctx: RequestContext<RoleServer>,
) -> Result<Reply> {
    let encoding = how.encoding;
    let token = ctx.meta.get_progress_token();
    let peer = ctx.peer.clone();
    let on_data: processes::OnData = Box::new(move |data, next| {
        let (peer, token) = (peer.clone(), token.clone());
        Box::pin(async move {
            let Some(t) = token else { return true };
            let mut p = ProgressNotificationParam::new(t, next as f64);
            p.message = Some(data);
            peer.notify_progress(p).await.is_ok()
        })
    });
    let (view, c) = tokio::select! {
        r = processes::read(&relay.processes, caller, sandbox, id, how, on_data) => r?,
        _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled")),
    };
    let state = if c.exit_code.is_some() { ProcessState::Exited } else { view.state };
    Ok(Reply::Attached(Attached {
        process_id: id.to_string(),
        state,
        exit_code: c.exit_code.or(view.exit_code),
        output: c.output,
        encoding,
        since: c.since,
        next: c.next,
        lost: c.lost,
        earlier_output: view.earlier_output,
        closed: c.closed,
    }))
}
