//! The MCP tools: `sandboxes` and `exec`. Arguments are checked here; the work is done by the
//! domain modules the REST handlers use too. Failures are tool errors (`isError`) whose text
//! says what was wrong, in the relay's `code: message` form (a limit names its setting).
use std::sync::Arc;

use futures::StreamExt;
use rmcp::{
    model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, Tool},
    service::RequestContext,
    RoleServer,
};
use serde::{de::DeserializeOwned, Deserialize};
use serde_json::{json, Value};

use crate::{
    auth::Caller,
    error::ApiError,
    exec::{self, ExecEvent, ExecRequest, ExecResult},
    streams::Kind,
    Relay,
};

/// Marks the fields of a result whose text came from the sandbox: output of programs there,
/// data, not instructions.
pub(super) const SANDBOX_OUTPUT_META: &str = "hangar/sandbox_output";

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

pub fn list() -> Vec<Tool> {
    vec![
        Tool::new(
            "sandboxes",
            "The sandboxes you may use: name, provider, state, and whether each has its daemon \
             (streamed output, background processes' input and watches need it).",
            schema(json!({ "type": "object", "properties": {}, "additionalProperties": false })),
        ),
        Tool::new(
            "exec",
            "Runs a command (bash -lc) in a sandbox and returns exit_code, the last 256 KiB of \
             stdout and stderr, and streamed. With stream: true and a progress token, each chunk \
             of output is sent as it prints as a progress notification (progress = bytes so far, \
             message = the text). Cancelling the call kills the command. Without a daemon the \
             output comes in one piece (streamed: false).",
            schema(json!({
                "type": "object",
                "properties": {
                    "sandbox": { "type": "string", "description": "Sandbox name or id" },
                    "command": { "type": "string", "description": "Run with bash -lc" },
                    "cwd": { "type": "string", "description": "Absolute, or relative to the sandbox's working directory" },
                    "timeout": { "type": "integer", "minimum": 1, "maximum": exec::MAX_TIMEOUT_SECONDS, "description": "Seconds (default 600)" },
                    "stream": { "type": "boolean", "description": "Send output as progress notifications as it prints" }
                },
                "required": ["sandbox", "command"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "process",
            "Background processes, yours only. action start (command, cwd): starts it (bash -lc) \
             and returns its process_id at once. attach (process_id, since, wait_seconds up to \
             600): output from since (default: all still kept), then what comes during the wait, \
             as progress notifications; returns the last 64 KiB, state, exit_code and next (pass \
             it as since next time). input (process_id, input, eof): writes to its stdin, eof \
             closes it. kill (process_id): SIGTERM, SIGKILL 3 s later. list: your processes.",
            schema(json!({
                "type": "object",
                "properties": {
                    "action": { "type": "string", "enum": ["start", "attach", "input", "kill", "list"] },
                    "sandbox": { "type": "string", "description": "Sandbox name or id" },
                    "command": { "type": "string" },
                    "cwd": { "type": "string" },
                    "process_id": { "type": "string" },
                    "since": { "type": "integer", "minimum": 0, "description": "Output offset (a previous attach's next)" },
                    "wait_seconds": { "type": "integer", "minimum": 0, "maximum": super::process::MAX_WAIT_SECONDS },
                    "input": { "type": "string" },
                    "eof": { "type": "boolean" }
                },
                "required": ["action", "sandbox"],
                "additionalProperties": false
            })),
        ),
    ]
}

/// A tool error whose text is the relay's error.
fn failed(e: ApiError) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.code, e.message))]);
    r.structured_content = Some(json!({ "error": { "code": e.code, "message": e.message } }));
    r
}

pub(super) fn args<T: DeserializeOwned>(tool: &str, a: Option<JsonObject>) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(a.unwrap_or_default()))
        .map_err(|e| ApiError::bad_request(format!("{tool}: bad arguments: {e}")))
}

/// A successful result: the value as structured content and as JSON text, with the fields that
/// hold sandbox output named in `_meta`.
fn done(v: Value, sandbox_fields: &[&str]) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
    r.structured_content = Some(v);
    if !sandbox_fields.is_empty() {
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(SANDBOX_OUTPUT_META.into(), json!(sandbox_fields));
        r.meta = Some(meta);
    }
    r
}

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    req: CallToolRequestParams,
    ctx: RequestContext<RoleServer>,
) -> CallToolResult {
    if relay.streams.shutting_down() {
        return failed(ApiError::unavailable("the relay is shutting down: no new calls"));
    }
    let result = match req.name.as_ref() {
        "sandboxes" => sandboxes(relay, req.arguments),
        "exec" => exec_tool(relay, caller, req.arguments, ctx).await,
        "process" => super::process::call(relay, caller, req.arguments, ctx).await.map(|(v, f)| done(v, f)),
        other => Err(ApiError::bad_request(format!("no tool {other:?}; tools: sandboxes, exec, process"))),
    };
    result.unwrap_or_else(failed)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

fn sandboxes(relay: &Relay, a: Option<JsonObject>) -> Result<CallToolResult, ApiError> {
    let NoArgs {} = args("sandboxes", a)?;
    let list: Vec<Value> = relay
        .store
        .sandboxes()?
        .into_iter()
        .map(|s| json!({ "name": s.name, "id": s.id, "provider": s.provider, "state": s.state, "daemon": s.daemon }))
        .collect();
    Ok(done(json!({ "sandboxes": list }), &[]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecArgs {
    sandbox: String,
    command: String,
    cwd: Option<String>,
    timeout: Option<u64>,
    #[serde(default)]
    stream: bool,
}

fn exec_result(r: &ExecResult) -> Value {
    serde_json::to_value(r).unwrap_or_else(|_| json!({ "exit_code": r.exit_code }))
}

async fn exec_tool(
    relay: &Arc<Relay>,
    caller: &Caller,
    a: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult, ApiError> {
    let a: ExecArgs = args("exec", a)?;
    let req = ExecRequest::new(a.command, a.cwd, a.timeout)?;
    let progress = ctx.meta.get_progress_token();
    let Some(token) = progress.filter(|_| a.stream) else {
        let r = exec::run(relay, &a.sandbox, req).await?;
        return Ok(done(exec_result(&r), &["stdout", "stderr"]));
    };
    // Dropping this stream (the call cancelled: the SDK drops the handler's future) kills the
    // command; the relay's closes (revocation, shutdown, ...) end it with a result.
    let events = exec::stream(relay.clone(), caller, &a.sandbox, req, Kind::McpExec).await?;
    futures::pin_mut!(events);
    let mut sent: u64 = 0;
    loop {
        // A cancelled call (`notifications/cancelled`, or its response stream closed) drops the
        // stream, which kills the command.
        let ev = tokio::select! {
            _ = ctx.ct.cancelled() => return Err(ApiError::unavailable("the call was cancelled: the command was killed")),
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
                    return Err(ApiError::unavailable("the client went away"));
                }
            }
            ExecEvent::Result(r) => return Ok(done(exec_result(&r), &["stdout", "stderr"])),
        }
    }
    Err(ApiError::bad_gateway("the command's stream ended without a result"))
}
