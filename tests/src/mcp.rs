//! The relay's MCP endpoint over raw HTTP, for the tests that need a status or one tool call
//! without an SDK: requests to `/mcp`, a 2025-era session, a tool call in it.
use serde_json::{json, Value};

use crate::{
    build_request, full_body,
    relay::{Relay, Sse},
    send_http1, within, STEP,
};

/// The 2025-era protocol version these helpers speak (sessions, `initialize`).
pub const VERSION: &str = "2025-06-18";

/// One request to `/mcp` with `token`, `session` and `extra` headers (which replace the
/// defaults); the response unread.
pub async fn request(
    relay: &Relay,
    method: &str,
    token: Option<&str>,
    session: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<Value>,
) -> hyper::Response<hyper::body::Incoming> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    if let Some(a) = &auth {
        headers.push(("authorization", a));
    }
    if let Some(s) = session {
        headers.extend([("mcp-session-id", s), ("mcp-protocol-version", VERSION)]);
    }
    let body = full_body(body.map(|b| b.to_string().into()).unwrap_or_default());
    let mut req = build_request(method, "/mcp", relay.addr, false, &headers, body);
    // Replacing, not adding: `Host` is already set.
    for (k, v) in extra {
        let name = http::HeaderName::from_bytes(k.as_bytes()).expect("a header name");
        req.headers_mut().insert(name, http::HeaderValue::from_str(v).expect("a header value"));
    }
    within(STEP, &format!("{method} /mcp"), send_http1(relay.addr, req)).await
}

/// A 2025-era session (initialize with a 2025 protocol version, then initialized): its id.
pub async fn open_session(relay: &Relay, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}});
    let resp = request(relay, "POST", Some(token), None, &[], Some(init)).await;
    assert_eq!(resp.status(), 200, "initialize");
    let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let session = session.expect("a 2025-era initialize gets an Mcp-Session-Id");
    let answer = Sse::from_response(resp).next(STEP).await.expect("the initialize result").json();
    assert_eq!(answer["result"]["protocolVersion"], json!(VERSION), "{answer}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = request(relay, "POST", Some(token), Some(&session), &[], Some(initialized)).await;
    assert!(resp.status().is_success(), "initialized: {}", resp.status());
    session
}

/// `tools/call` of `tool` with `arguments` in `session`: the call's `result` (a tool's failure
/// is a result with `isError`).
pub async fn call_tool(relay: &Relay, token: &str, session: &str, tool: &str, arguments: Value) -> Value {
    let call =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let resp = request(relay, "POST", Some(token), Some(session), &[], Some(call)).await;
    assert_eq!(resp.status(), 200, "tools/call {tool}");
    let answer = Sse::from_response(resp).next(STEP).await.expect("the tool's answer").json();
    answer.get("result").cloned().unwrap_or_else(|| panic!("tools/call {tool}: no result in {answer}"))
}
