//! A stand-in for the model APIs the agent CLIs call, so the real CLIs run in the tests offline
//! and the same way every time: Anthropic's Messages API (`POST /v1/messages`, streamed as
//! Anthropic's server-sent events, and `POST /v1/messages/count_tokens`), as Claude Code calls it
//! (`ANTHROPIC_BASE_URL`); and OpenAI's Responses API (`POST /v1/responses`, streamed), as far as
//! `codex exec` uses it (a model provider whose `base_url` is [`Model::openai_url`]).
//!
//! A test scripts the model's answers in order ([`Step`]): a reply (text, then tool calls), or
//! an error with Anthropic's status, body and headers (a 429's `retry-after` and rate-limit
//! headers, a 529's overload). Each request of the agent's own loop (one that offers tools)
//! takes the next step; once the script is spent it is answered "done" with `end_turn`. A side
//! request (no tools: a title, a summary) is answered with a short text and takes no step, so a
//! CLI version that adds or drops one does not shift the script. Every request is recorded with
//! its path and body ([`Model::requests`]), so a test can read what the CLI sent: the tool
//! results it returned, the reason of a denial.
//!
//! The stand-in runs on a thread of its own with its own runtime, like the other doubles here.
use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::{
    body::{Frame, Incoming, SizeHint},
    Request, Response,
};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

type Body = BoxBody<Bytes, hyper::Error>;

/// One scripted answer of the model.
#[derive(Debug, Clone)]
pub enum Step {
    /// A message: its text (if any), then its tool calls (`stop_reason` `tool_use` when there
    /// are any, else `end_turn`).
    Reply { text: Option<String>, tools: Vec<ToolCall> },
    /// An error answer: the HTTP status, Anthropic's error type and message, and for a 429 the
    /// seconds in `retry-after`.
    Error { status: u16, kind: String, message: String, retry_after: Option<u64> },
}

/// A `tool_use` block: the tool's name and its input.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub name: String,
    pub input: Value,
}

impl Step {
    /// A reply of text alone, ending the turn.
    pub fn text(text: &str) -> Step {
        Step::Reply { text: Some(text.into()), tools: Vec::new() }
    }

    /// A reply that calls one tool.
    pub fn tool(name: &str, input: Value) -> Step {
        Step::Reply { text: None, tools: vec![ToolCall { name: name.into(), input }] }
    }

    /// A reply that runs a shell command with Claude Code's `Bash` tool.
    pub fn bash(command: &str) -> Step {
        Step::tool("Bash", json!({"command": command, "description": "run it"}))
    }

    /// Anthropic's 429, with `retry-after` and its rate-limit headers.
    pub fn rate_limited(retry_after: u64) -> Step {
        Step::Error {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "Number of request tokens has exceeded your per-minute rate limit".into(),
            retry_after: Some(retry_after),
        }
    }

    /// Anthropic's 529.
    pub fn overloaded() -> Step {
        Step::Error { status: 529, kind: "overloaded_error".into(), message: "Overloaded".into(), retry_after: None }
    }

    /// Anthropic's 401.
    pub fn unauthorized() -> Step {
        Step::Error {
            status: 401,
            kind: "authentication_error".into(),
            message: "invalid x-api-key".into(),
            retry_after: None,
        }
    }

    /// Anthropic's 400.
    pub fn bad_request(message: &str) -> Step {
        Step::Error { status: 400, kind: "invalid_request_error".into(), message: message.into(), retry_after: None }
    }

    /// A reply that runs a shell command with Codex's `exec_command` tool.
    pub fn exec_command(cmd: &str) -> Step {
        Step::tool("exec_command", json!({"cmd": cmd}))
    }

    /// A script written as JSON (what `hangar-model-standin` reads): an array of steps, each
    /// `{"text": "..."}`, `{"tool": NAME, "input": {...}}`, `{"text"?: ..., "tools": [{"name",
    /// "input"}, ...]}`, `{"bash": COMMAND}` or `{"error": {"status", "type", "message",
    /// "retry_after"?}}`.
    pub fn script_from_json(script: &Value) -> Result<Vec<Step>, String> {
        let steps = script.as_array().ok_or("a script is a JSON array of steps")?;
        steps.iter().enumerate().map(|(i, s)| Step::from_json(s).map_err(|e| format!("step {i}: {e}"))).collect()
    }

    fn from_json(step: &Value) -> Result<Step, String> {
        let text = |v: &Value| v.as_str().map(str::to_string).ok_or("\"text\" is a string");
        let call = |name: &Value, input: &Value| -> Result<ToolCall, String> {
            let name = name.as_str().ok_or("a tool's name is a string")?.to_string();
            let input = if input.is_null() { json!({}) } else { input.clone() };
            if !input.is_object() {
                return Err(format!("tool {name}: its input is an object"));
            }
            Ok(ToolCall { name, input })
        };
        if let Some(e) = step.get("error") {
            let status = e["status"].as_u64().and_then(|s| u16::try_from(s).ok()).ok_or("an error's status")?;
            let kind = e["type"].as_str().unwrap_or("api_error").to_string();
            let message = e["message"].as_str().unwrap_or("error").to_string();
            return Ok(Step::Error { status, kind, message, retry_after: e["retry_after"].as_u64() });
        }
        if let Some(c) = step.get("bash") {
            return Ok(Step::bash(c.as_str().ok_or("\"bash\" is a command")?));
        }
        if let Some(name) = step.get("tool") {
            return Ok(Step::Reply { text: None, tools: vec![call(name, &step["input"])?] });
        }
        let tools = match step.get("tools") {
            None => Vec::new(),
            Some(t) => t
                .as_array()
                .ok_or("\"tools\" is an array")?
                .iter()
                .map(|t| call(&t["name"], &t["input"]))
                .collect::<Result<_, _>>()?,
        };
        let text = step.get("text").map(text).transpose()?;
        if text.is_none() && tools.is_empty() {
            return Err(format!("not a step: {step}"));
        }
        Ok(Step::Reply { text, tools })
    }
}

/// A request the stand-in received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
    /// Whether it took a step of the script (a request of the agent's loop).
    pub scripted: bool,
    /// The answer's number, for a model call (`msg_stand_in_NNNN`, `resp_stand_in_NNNN`, the
    /// tool calls' `toolu_NNNN_i`): what the CLI's lines name it by.
    pub answer: Option<u64>,
    /// When the answer's last bytes were handed to the connection (Unix seconds; hyper writes
    /// them to the socket in the same poll), once they were: the instant the CLI can have all of
    /// it, so that what it prints next is timed from here.
    pub answered: Option<f64>,
}

struct Ctx {
    script: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<Recorded>>,
    counter: AtomicU64,
    /// Headers every Messages answer that is not an error carries (`plan_usage`).
    headers: Mutex<Vec<(String, String)>>,
}

/// The stand-in, serving until dropped.
pub struct Model {
    addr: SocketAddr,
    ctx: Arc<Ctx>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Model {
    /// Serves `script` on a free loopback port.
    pub fn start(script: Vec<Step>) -> Model {
        Model::serve_on("127.0.0.1:0".parse().expect("an address"), script).expect("starting the model stand-in")
    }

    /// Serves `script` on `addr` (port 0: a free one), e.g. on all addresses in a container of
    /// its own (`hangar-model-standin`).
    pub fn serve_on(addr: SocketAddr, script: Vec<Step>) -> std::io::Result<Model> {
        let ctx = Arc::new(Ctx {
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
            counter: 0.into(),
            headers: Mutex::new(Vec::new()),
        });
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = ctx.clone();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("the stand-in's runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    _ = serve(listener, served) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Ok(Model { addr, ctx, stop: Some(stop), thread: Some(thread) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the CLI's `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// `http://127.0.0.1:PORT/v1`: a Codex model provider's `base_url`.
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.ctx.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The steps not yet taken.
    pub fn left(&self) -> usize {
        self.ctx.script.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// From now on, every answer that is not an error reports a plan's usage as Anthropic's
    /// limiter does to a subscription's login (`anthropic-ratelimit-unified-*`): the five-hour
    /// window `five_hour` used (0 to 1), the seven-day one at 40%, both resetting at `resets_at`
    /// (Unix seconds) and a day after. Claude Code turns them into `rate_limit_event` lines when
    /// it logs in with `CLAUDE_CODE_OAUTH_TOKEN` (not with an API key).
    pub fn plan_usage(&self, five_hour: f64, resets_at: u64) {
        let status = if five_hour >= 1.0 {
            "rejected"
        } else if five_hour >= 0.8 {
            "allowed_warning"
        } else {
            "allowed"
        };
        let headers = [
            ("status", status.to_string()),
            ("reset", resets_at.to_string()),
            ("representative-claim", "five_hour".to_string()),
            ("5h-utilization", five_hour.to_string()),
            ("5h-reset", resets_at.to_string()),
            ("5h-status", status.to_string()),
            ("7d-utilization", "0.4".to_string()),
            ("7d-reset", (resets_at + 86_400).to_string()),
            ("7d-status", "allowed".to_string()),
        ];
        *self.ctx.headers.lock().unwrap_or_else(|p| p.into_inner()) =
            headers.into_iter().map(|(k, v)| (format!("anthropic-ratelimit-unified-{k}"), v)).collect();
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Ctx>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(answer(req, ctx).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

fn full(status: u16, content_type: &str, body: String, headers: &[(&str, String)]) -> Response<Body> {
    let mut b = Response::builder().status(status).header("content-type", content_type);
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    b.body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed()).expect("response")
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

async fn answer(req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), 64 * 1024 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return full(400, "application/json", error_body("invalid_request_error", &e.to_string()), &[]),
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // The record's place, so that its answer's number and the instant it was sent are added.
    let index = std::cell::Cell::new(None);
    let record = |scripted: bool| {
        let r = Recorded {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
            scripted,
            answer: None,
            answered: None,
        };
        let mut all = ctx.requests.lock().unwrap_or_else(|p| p.into_inner());
        all.push(r);
        index.set(Some(all.len() - 1));
    };
    // A request of the agent's loop (it offers tools) takes the script's next step; a side call
    // (a title, a summary) is answered "ok". With the step, the answer's number.
    let take = || {
        let scripted = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        record(scripted);
        let step = if scripted {
            ctx.script.lock().unwrap_or_else(|p| p.into_inner()).pop_front().unwrap_or_else(|| Step::text("done"))
        } else {
            Step::text("ok")
        };
        let id = ctx.counter.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(i) = index.get() {
            if let Some(r) = ctx.requests.lock().unwrap_or_else(|p| p.into_inner()).get_mut(i) {
                r.answer = Some(id);
            }
        }
        (step, id)
    };
    let response = match (method.as_str(), path.as_str()) {
        ("POST", "/v1/messages/count_tokens") => {
            record(false);
            let n = body.to_string().len() / 4;
            full(200, "application/json", json!({"input_tokens": n}).to_string(), &[])
        }
        ("POST", "/v1/messages") => {
            let (step, id) = take();
            let model = body["model"].as_str().unwrap_or("claude-stand-in").to_string();
            let stream = body["stream"].as_bool().unwrap_or(false);
            let mut answer = message(step, id, &model, stream);
            if answer.status().is_success() {
                for (k, v) in ctx.headers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    if let (Ok(k), Ok(v)) = (hyper::header::HeaderName::try_from(k.as_str()), v.parse()) {
                        answer.headers_mut().insert(k, v);
                    }
                }
            }
            answer
        }
        ("POST", "/v1/responses") => {
            let (step, id) = take();
            response(step, id)
        }
        _ => {
            record(false);
            full(404, "application/json", error_body("not_found_error", &format!("{method} {path}")), &[])
        }
    };
    let (parts, inner) = response.into_parts();
    Response::from_parts(parts, Stamped { inner, ctx: ctx.clone(), index: index.get(), done: false }.boxed())
}

/// An answer's body that notes in its request's record when its last bytes were handed to the
/// connection ([`Recorded::answered`]): as its last frame is taken, or when it is dropped unread.
struct Stamped {
    inner: Body,
    ctx: Arc<Ctx>,
    index: Option<usize>,
    done: bool,
}

impl Stamped {
    fn stamp(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let Some(i) = self.index else { return };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        if let Some(r) = self.ctx.requests.lock().unwrap_or_else(|p| p.into_inner()).get_mut(i) {
            r.answered = Some(now);
        }
    }
}

impl hyper::body::Body for Stamped {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.stamp(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.stamp(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Stamped {
    fn drop(&mut self) {
        self.stamp();
    }
}

/// A scripted step as Anthropic answers it: an error, a JSON message, or its event stream.
fn message(step: Step, id: u64, model: &str, stream: bool) -> Response<Body> {
    let (text, tools) = match step {
        Step::Error { status, kind, message, retry_after } => {
            let mut headers = vec![("request-id", format!("req_stand_in_{id}"))];
            if let Some(s) = retry_after {
                headers.extend([
                    ("retry-after", s.to_string()),
                    ("anthropic-ratelimit-requests-limit", "50".to_string()),
                    ("anthropic-ratelimit-requests-remaining", "0".to_string()),
                    ("anthropic-ratelimit-requests-reset", reset_in(s)),
                    ("anthropic-ratelimit-input-tokens-limit", "30000".to_string()),
                    ("anthropic-ratelimit-input-tokens-remaining", "0".to_string()),
                    ("anthropic-ratelimit-input-tokens-reset", reset_in(s)),
                ]);
            }
            let headers: Vec<(&str, String)> = headers.into_iter().collect();
            return full(status, "application/json", error_body(&kind, &message), &headers);
        }
        Step::Reply { text, tools } => (text, tools),
    };
    let mut blocks = Vec::new();
    if let Some(t) = &text {
        blocks.push(json!({"type": "text", "text": t}));
    }
    for (i, call) in tools.iter().enumerate() {
        blocks.push(
            json!({"type": "tool_use", "id": format!("toolu_{id:04}_{i}"), "name": call.name, "input": call.input}),
        );
    }
    let stop_reason = if tools.is_empty() { "end_turn" } else { "tool_use" };
    let usage = json!({"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let msg_id = format!("msg_stand_in_{id:04}");
    if !stream {
        let body = json!({"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop_reason, "stop_sequence": null, "usage": usage});
        return full(200, "application/json", body.to_string(), &[]);
    }
    let mut events = vec![
        sse(
            "message_start",
            json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
        ),
        sse("ping", json!({"type": "ping"})),
    ];
    for (index, block) in blocks.iter().enumerate() {
        let (start, delta) = match block["type"].as_str() {
            Some("text") => (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": block["text"]})),
            _ => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            ),
        };
        events.push(sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        events.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})));
        events.push(sse("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    }
    events.push(sse(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    ));
    events.push(sse("message_stop", json!({"type": "message_stop"})));
    full(200, "text/event-stream", events.concat(), &[("cache-control", "no-cache".into())])
}

/// A scripted step as OpenAI's Responses API answers it (always streamed, as Codex asks): an
/// error with OpenAI's body and rate-limit headers, or the events of one response whose output
/// is the text as a `message` item, then each tool call as a `function_call` item.
fn response(step: Step, id: u64) -> Response<Body> {
    let (text, tools) = match step {
        Step::Error { status, kind, message, retry_after } => {
            let mut headers = vec![("x-request-id", format!("req_stand_in_{id}"))];
            if let Some(s) = retry_after {
                headers.extend([
                    ("retry-after", s.to_string()),
                    ("x-ratelimit-limit-requests", "50".to_string()),
                    ("x-ratelimit-remaining-requests", "0".to_string()),
                    ("x-ratelimit-reset-requests", format!("{s}s")),
                ]);
            }
            let body = json!({"error": {"message": message, "type": kind, "code": null, "param": null}});
            return full(status, "application/json", body.to_string(), &headers);
        }
        Step::Reply { text, tools } => (text, tools),
    };
    let resp_id = format!("resp_stand_in_{id:04}");
    let mut items = Vec::new();
    if let Some(t) = &text {
        items.push(json!({"type": "message", "id": format!("msg_{id:04}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}]}));
    }
    for (i, call) in tools.iter().enumerate() {
        items.push(
            json!({"type": "function_call", "id": format!("fc_{id:04}_{i}"), "call_id": format!("call_{id:04}_{i}"),
            "name": call.name, "arguments": call.input.to_string(), "status": "completed"}),
        );
    }
    let mut events = vec![sse(
        "response.created",
        json!({"type": "response.created", "response": {"id": resp_id, "object": "response", "status": "in_progress", "output": []}}),
    )];
    for (index, item) in items.iter().enumerate() {
        events.push(sse(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        ));
        if let Some(t) = item["content"][0]["text"].as_str() {
            events.push(sse(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "output_index": index, "content_index": 0, "item_id": item["id"], "delta": t}),
            ));
        }
        events.push(sse(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
    }
    let usage = json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120});
    events.push(sse(
        "response.completed",
        json!({"type": "response.completed", "response": {"id": resp_id, "object": "response", "status": "completed", "output": items, "usage": usage}}),
    ));
    full(200, "text/event-stream", events.concat(), &[("cache-control", "no-cache".into())])
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// An RFC 3339 time `s` seconds from now, as Anthropic's reset headers give it.
fn reset_in(s: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::e2b_api::rfc3339(now + s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::{build_request, full_body, read_raw, send_http1};

    async fn post(model: &Model, path: &str, body: Value) -> crate::connect::RawResponse {
        let headers = [("content-type", "application/json")];
        let req = build_request("POST", path, model.addr, false, &headers, full_body(Bytes::from(body.to_string())));
        read_raw(send_http1(model.addr, req).await).await
    }

    fn data_of(sse: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(sse)
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("event JSON"))
            .collect()
    }

    /// The script in order for the agent's loop, side requests answered aside, Anthropic's event
    /// stream and errors as the CLIs read them.
    #[tokio::test]
    async fn the_script_answers_the_agents_loop_in_order() {
        let model = Model::start(vec![Step::bash("ls"), Step::rate_limited(1), Step::text("all done")]);
        let turn = json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}], "messages": []});

        let first = post(&model, "/v1/messages", turn.clone()).await;
        assert_eq!(first.status, 200);
        let events = data_of(&first.body);
        let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[2]["content_block"]["name"], json!("Bash"));
        let input: Value =
            serde_json::from_str(events[3]["delta"]["partial_json"].as_str().expect("json")).expect("input");
        assert_eq!(input["command"], json!("ls"));
        assert_eq!(events[5]["delta"]["stop_reason"], json!("tool_use"));

        // A side request (no tools) takes no step.
        let side = post(&model, "/v1/messages", json!({"model": "m", "messages": []})).await;
        assert_eq!(side.json()["content"][0]["text"], json!("ok"));

        let limited = post(&model, "/v1/messages", turn.clone()).await;
        assert_eq!(limited.status, 429);
        assert_eq!(limited.headers["retry-after"], "1");
        assert!(limited.headers.contains_key("anthropic-ratelimit-requests-reset"));
        assert_eq!(limited.json()["error"]["type"], json!("rate_limit_error"));

        let last = data_of(&post(&model, "/v1/messages", turn.clone()).await.body);
        assert_eq!(last[3]["delta"]["text"], json!("all done"));
        assert_eq!(last[5]["delta"]["stop_reason"], json!("end_turn"));
        assert_eq!(model.left(), 0);
        let spent = data_of(&post(&model, "/v1/messages", turn).await.body);
        assert_eq!(spent[3]["delta"]["text"], json!("done"), "a spent script ends the turn");

        let counted = post(&model, "/v1/messages/count_tokens", json!({"messages": []})).await;
        assert!(counted.json()["input_tokens"].as_u64().is_some());
        let scripted: Vec<bool> = model.requests().iter().map(|r| r.scripted).collect();
        assert_eq!(scripted, [true, false, true, true, true, false]);
        // Each answer's number and the instant it was sent, in order.
        let answers: Vec<Option<u64>> = model.requests().iter().map(|r| r.answer).collect();
        assert_eq!(answers, [Some(1), Some(2), Some(3), Some(4), Some(5), None]);
        let sent: Vec<f64> = model.requests().iter().map(|r| r.answered.expect("answered")).collect();
        assert!(sent.windows(2).all(|w| w[0] <= w[1]) && sent[0] > 1.7e9, "{sent:?}");
    }

    /// A script written as JSON, as the stand-in's binary reads it.
    #[test]
    fn a_script_from_json() {
        let script = json!([{"tool": "Read", "input": {"file_path": "/w/a"}}, {"text": "done"}, {"bash": "ls"},
            {"text": "t", "tools": [{"name": "Glob", "input": {"pattern": "*"}}]},
            {"error": {"status": 429, "type": "rate_limit_error", "message": "slow", "retry_after": 1}}]);
        let steps = Step::script_from_json(&script).expect("a script");
        assert!(
            matches!(&steps[0], Step::Reply { text: None, tools } if tools[0].name == "Read" && tools[0].input["file_path"] == "/w/a")
        );
        assert!(matches!(&steps[1], Step::Reply { text: Some(t), tools } if t == "done" && tools.is_empty()));
        assert!(
            matches!(&steps[2], Step::Reply { tools, .. } if tools[0].name == "Bash" && tools[0].input["command"] == "ls")
        );
        assert!(matches!(&steps[3], Step::Reply { text: Some(_), tools } if tools[0].name == "Glob"));
        assert!(matches!(&steps[4], Step::Error { status: 429, retry_after: Some(1), .. }));
        for bad in
            [json!({}), json!([{}]), json!([{"tool": 3}]), json!([{"tool": "X", "input": [1]}]), json!([{"error": {}}])]
        {
            assert!(Step::script_from_json(&bad).is_err(), "{bad}");
        }
    }

    /// The Responses API as Codex reads it: a tool call as a `function_call` item, text as a
    /// `message`, `response.completed` with usage last; errors with OpenAI's body and headers.
    #[tokio::test]
    async fn the_responses_api_streams_items_and_errors() {
        let model = Model::start(vec![Step::exec_command("ls"), Step::rate_limited(1), Step::text("all done")]);
        let turn =
            json!({"model": "m", "stream": true, "tools": [{"type": "function", "name": "exec_command"}], "input": []});
        let first = data_of(&post(&model, "/v1/responses", turn.clone()).await.body);
        let types: Vec<&str> = first.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            types,
            ["response.created", "response.output_item.added", "response.output_item.done", "response.completed"]
        );
        let call = &first[2]["item"];
        assert_eq!((&call["type"], &call["name"]), (&json!("function_call"), &json!("exec_command")));
        let args: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("JSON");
        assert_eq!(args, json!({"cmd": "ls"}));
        assert_eq!(first[3]["response"]["usage"]["output_tokens"], json!(20));

        let limited = post(&model, "/v1/responses", turn.clone()).await;
        assert_eq!(limited.status, 429);
        assert_eq!(limited.headers["retry-after"], "1");
        assert!(limited.json()["error"]["message"].is_string());

        let last = data_of(&post(&model, "/v1/responses", turn).await.body);
        assert_eq!(last[2]["delta"], json!("all done"));
        assert_eq!(last[3]["item"]["content"][0]["text"], json!("all done"));
        assert_eq!(model.left(), 0);
    }
}
