//! The MCP tools, one file each: `sandboxes`, `exec`, `process`. Arguments are checked there;
//! the work is done by the domain modules the REST handlers use too. Failures are tool errors
//! (`isError`) whose text says what was wrong, in the relay's `code: message` form with the
//! codes REST uses (a limit names its setting).
mod exec;
mod process;
mod sandboxes;

use std::sync::Arc;

use rmcp::{
    model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations},
    service::RequestContext,
    RoleServer,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::{
    api::error::classify,
    app::Relay,
    auth::Caller,
    error::{Error, Result},
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

/// What a call can do to the world, as MCP's tool annotations say it to clients (which may
/// auto-approve a tool that only reads). Every hint is a field, so a new tool cannot leave one
/// to the spec's defaults (`destructiveHint` and `openWorldHint` default to true, which would
/// make every tool look dangerous). A tool whose `action` argument chooses between reading and
/// writing is described by what its worst action does.
struct Hints {
    /// Changes nothing anywhere.
    read_only: bool,
    /// Can destroy or kill (meaningful when not read-only).
    destructive: bool,
    /// Calling it again with the same arguments changes nothing more.
    idempotent: bool,
    /// Reaches past the relay's own state: runs commands in sandboxes.
    open_world: bool,
}

impl Hints {
    fn titled(self, title: &str) -> ToolAnnotations {
        let Hints { read_only, destructive, idempotent, open_world } = self;
        ToolAnnotations::from_raw(
            Some(title.to_string()),
            Some(read_only),
            Some(destructive),
            Some(idempotent),
            Some(open_world),
        )
    }
}

pub fn list() -> Vec<Tool> {
    vec![
        Tool::new(
            "sandboxes",
            "The sandboxes you may use: name, provider, state, and whether each has its daemon \
             (streamed output, background processes' input and watches need it).",
            schema(json!({ "type": "object", "properties": {}, "additionalProperties": false })),
        )
        .with_annotations(
            Hints { read_only: true, destructive: false, idempotent: true, open_world: false }.titled("List sandboxes"),
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
                    "timeout": { "type": "integer", "minimum": 1, "maximum": crate::exec::MAX_TIMEOUT_SECONDS, "description": "Seconds (default 600)" },
                    "stream": { "type": "boolean", "description": "Send output as progress notifications as it prints" }
                },
                "required": ["sandbox", "command"],
                "additionalProperties": false
            })),
        )
        // Any command at all: it may delete files, kill processes, reach the network.
        .with_annotations(
            Hints { read_only: false, destructive: true, idempotent: false, open_world: true }.titled("Run a command"),
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
                    "wait_seconds": { "type": "integer", "minimum": 0, "maximum": process::MAX_WAIT_SECONDS },
                    "input": { "type": "string" },
                    "eof": { "type": "boolean" },
                    "encoding": { "type": "string", "enum": ["text", "base64"], "description": "attach: text (default; bytes that are not UTF-8 become U+FFFD) or base64 of the exact bytes" }
                },
                "required": ["action", "sandbox"],
                "additionalProperties": false
            })),
        )
        // list and attach only read, but start runs any command and kill kills.
        .with_annotations(
            Hints { read_only: false, destructive: true, idempotent: false, open_world: true }
                .titled("Background processes"),
        ),
    ]
}

/// A tool error whose text is the relay's error.
fn failed(e: Error) -> CallToolResult {
    let (_, code) = classify(&e);
    let message = e.to_string();
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))]);
    r.structured_content = Some(json!({ "error": { "code": code, "message": message } }));
    r
}

fn args<T: DeserializeOwned>(tool: &str, a: Option<JsonObject>) -> Result<T> {
    serde_json::from_value(Value::Object(a.unwrap_or_default()))
        .map_err(|e| Error::invalid(format!("{tool}: bad arguments: {e}")))
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
        return failed(Error::unavailable("the relay is shutting down: no new calls"));
    }
    let result = match req.name.as_ref() {
        "sandboxes" => sandboxes::call(relay, req.arguments),
        "exec" => exec::call(relay, caller, req.arguments, ctx).await,
        "process" => process::call(relay, caller, req.arguments, ctx).await,
        other => Err(Error::invalid(format!("no tool {other:?}; tools: sandboxes, exec, process"))),
    };
    result.unwrap_or_else(failed)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::list;

    /// The annotations as a client reads them from `tools/list`: (readOnlyHint, destructiveHint,
    /// idempotentHint, openWorldHint) by tool name.
    fn hints() -> Vec<(String, Value)> {
        list()
            .iter()
            .map(|t| {
                (t.name.to_string(), serde_json::to_value(t).map(|v| v["annotations"].clone()).unwrap_or_default())
            })
            .collect()
    }

    #[test]
    fn every_tool_says_every_hint_and_a_title() {
        for (name, a) in hints() {
            assert!(a["title"].as_str().is_some_and(|t| !t.is_empty()), "{name}: no title in {a}");
            for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
                assert!(a[hint].is_boolean(), "{name}: no {hint} in {a}");
            }
            // A client auto-approves what only reads: that must never be what destroys.
            assert!(!(a["readOnlyHint"] == true && a["destructiveHint"] == true), "{name}: {a}");
        }
    }

    #[test]
    fn only_listing_sandboxes_is_read_only_and_commands_are_destructive_and_open_world() {
        let of = |want: &str| {
            let (_, a) = hints().into_iter().find(|(n, _)| n == want).unwrap_or_else(|| panic!("no tool {want}"));
            ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"].map(|h| a[h] == true)
        };
        assert_eq!(of("sandboxes"), [true, false, true, false]);
        // Any command: it may delete, kill, reach the network.
        assert_eq!(of("exec"), [false, true, false, true]);
        // list and attach read, but start runs any command and kill kills.
        assert_eq!(of("process"), [false, true, false, true]);
    }
}
