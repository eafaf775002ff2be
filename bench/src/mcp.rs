//! A minimal MCP client over Streamable HTTP (revision 2025-06-18, with a session), enough to
//! call a tool with a progress token and see each progress notification the moment it arrives.
//! The bench speaks the protocol itself so that no client library's buffering is measured.

use std::{net::SocketAddr, time::Duration};

use bytes::Bytes;
use hangar_e2e::{build_request, full_body, read_raw, relay::Sse, send_http1};
use serde_json::{json, Value};

use crate::{
    error::{fail, Result},
    stats::now,
};

const REVISION: &str = "2025-06-18";

pub struct Mcp {
    addr: SocketAddr,
    auth: String,
    session: Option<String>,
    next_id: u64,
}

impl Mcp {
    /// Initializes a session at `addr`'s `/mcp` with a bearer token.
    pub async fn connect(addr: SocketAddr, token: &str) -> Result<Mcp> {
        let mut m = Mcp { addr, auth: format!("Bearer {token}"), session: None, next_id: 1 };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": REVISION, "capabilities": {},
            "clientInfo": {"name": "hangar-bench", "version": env!("CARGO_PKG_VERSION")}}});
        let resp = m.post(&init).await;
        m.session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let answer = m.answer(resp, 0, &mut |_, _| {}).await?;
        if answer.get("result").is_none() {
            return Err(fail("MCP initialize", answer));
        }
        let resp = m.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        if resp.status().as_u16() != 202 {
            return Err(fail("MCP notifications/initialized", resp.status()));
        }
        Ok(m)
    }

    /// Calls `tool` with a progress token; `on_progress(message, received_at)` runs for each
    /// progress notification. The tool's structured result, or an error if the tool failed.
    pub async fn call_tool(
        &mut self,
        tool: &str,
        arguments: Value,
        on_progress: &mut dyn FnMut(&str, f64),
    ) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments, "_meta": {"progressToken": format!("bench-{id}")}}});
        let resp = self.post(&req).await;
        let answer = self.answer(resp, id, on_progress).await?;
        let result = answer.get("result").ok_or_else(|| fail(format!("MCP {tool}"), &answer))?;
        if result["isError"].as_bool() == Some(true) {
            return Err(fail(format!("MCP {tool}"), &result["content"]));
        }
        Ok(result["structuredContent"].clone())
    }

    async fn post(&self, body: &Value) -> hyper::Response<hyper::body::Incoming> {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("authorization", self.auth.as_str()),
            ("mcp-protocol-version", REVISION),
        ];
        if let Some(s) = &self.session {
            headers.push(("mcp-session-id", s.as_str()));
        }
        let req = build_request("POST", "/mcp", self.addr, false, &headers, full_body(Bytes::from(body.to_string())));
        send_http1(self.addr, req).await
    }

    /// Reads the JSON-RPC answer with `id` from a JSON body or an event stream, passing
    /// progress notifications on as they come.
    async fn answer(
        &self,
        resp: hyper::Response<hyper::body::Incoming>,
        id: u64,
        on_progress: &mut dyn FnMut(&str, f64),
    ) -> Result<Value> {
        let status = resp.status().as_u16();
        let is_json = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if status != 200 || is_json {
            let raw = read_raw(resp).await;
            if status != 200 {
                return Err(fail("MCP request", format!("{status}: {}", String::from_utf8_lossy(&raw.body))));
            }
            return serde_json::from_slice(&raw.body).map_err(|e| fail("MCP answer", e));
        }
        let mut sse = Sse::from_response(resp);
        while let Some(ev) = sse.next(Duration::from_secs(60)).await {
            let at = now();
            let Ok(msg) = serde_json::from_str::<Value>(&ev.data) else { continue };
            if msg["method"] == "notifications/progress" {
                on_progress(msg["params"]["message"].as_str().unwrap_or_default(), at);
            } else if msg["id"] == id {
                return Ok(msg);
            }
        }
        Err(fail("MCP answer", "the event stream ended without one"))
    }
}
