//! The `exec` tool: a command run to its end, its output streamed as progress notifications
//! when the call asks for it.
use std::sync::{Arc, LazyLock};

use futures::StreamExt;
use rmcp::{
    model::{JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{process::In, shape::Shape};
use crate::{
    api::rest::inputs::ExecBody,
    auth::Caller,
    error::{Error, Result},
    exec::{self, ExecEvent, ExecResult},
    handles::Relay,
    streams::Front,
};

/// The `exec` tool's arguments: a sandbox and REST's exec body; its schema is derived (`Shape`).
#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    #[serde(flatten)]
    at: In,
    #[serde(flatten)]
    run: ExecBody,
    /// Send output as progress notifications as it prints
    #[serde(default)]
    stream: bool,
}

pub(super) static SHAPE: LazyLock<Shape<Args>> = LazyLock::new(|| Shape::new("exec", true));

/// The `exec` tool's result: the command's, as REST answers it.
pub(super) type Reply = ExecResult;

impl super::Reply for ExecResult {
    fn sandbox_output(&self) -> &'static [&'static str] {
        &["stdout", "stderr"]
    }
}

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    a: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<Reply> {
    let a = SHAPE.read(a)?;
    let req = a.run.checked()?;
    let progress = ctx.meta.get_progress_token();
    let Some(token) = progress.filter(|_| a.stream) else {
        let r = exec::run(&relay.execs, caller, &a.at.sandbox, req).await?;
        return Ok(r);
    };
    // Dropping this stream (the call cancelled: the SDK drops the handler's future) kills the
    // command; the relay's closes (revocation, shutdown, ...) end it with a result.
    let events = exec::stream(relay.execs.clone(), caller, &a.at.sandbox, req, Front::Mcp).await?;
    futures::pin_mut!(events);
    let mut sent: u64 = 0;
    loop {
        // A cancelled call (`notifications/cancelled`, or its response stream closed) drops the
        // stream, which kills the command.
        let ev = tokio::select! {
            _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled: the command was killed")),
            ev = events.next() => ev,
        };
        let Some(ev) = ev else { break };
        match ev {
            ExecEvent::Stdout(t) | ExecEvent::Stderr(t) => {
                sent += t.len() as u64;
                let mut p = ProgressNotificationParam::new(token.clone(), sent as f64);
                p.message = Some(t);
                if ctx.peer.notify_progress(p).await.is_err() {
                    // The client is gone: dropping the stream kills the command.
                    return Err(Error::unavailable("the client went away"));
                }
            }
            // Progress is best effort: the result has the end of each output.
            ExecEvent::Gap { .. } => {}
            ExecEvent::Result(r) => return Ok(r),
        }
    }
    Err(Error::daemon("the command's stream ended without a result"))
}
