//! The relay's MCP endpoint over raw HTTP, where the status is what is tested (the SDKs hide
//! it): ending a 2025-era session.
use hangar_e2e::{
    build_request, full_body, read_raw,
    relay::{Relay, Sse, StateDir},
    send_http1, within, RawResponse, STEP,
};
use serde_json::{json, Value};

const VERSION: &str = "2025-06-18";

/// One request to `/mcp` with `token`, `session` and `extra` headers (which replace the
/// defaults); the response unread.
async fn mcp(
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

async fn delete(relay: &Relay, token: Option<&str>, session: &str, extra: &[(&str, &str)]) -> RawResponse {
    read_raw(mcp(relay, "DELETE", token, Some(session), extra, None).await).await
}

/// A 2025-era session (initialize with a 2025 protocol version, then initialized): its id.
async fn open_session(relay: &Relay, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}});
    let resp = mcp(relay, "POST", Some(token), None, &[], Some(init)).await;
    assert_eq!(resp.status(), 200, "initialize");
    let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let session = session.expect("a 2025-era initialize gets an Mcp-Session-Id");
    let answer = Sse::from_response(resp).next(STEP).await.expect("the initialize result").json();
    assert_eq!(answer["result"]["protocolVersion"], json!(VERSION), "{answer}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = mcp(relay, "POST", Some(token), Some(&session), &[], Some(initialized)).await;
    assert!(resp.status().is_success(), "initialized: {}", resp.status());
    session
}

/// `tools/list` in `session`: the HTTP status (200 while the session is open, 404 after).
async fn list_tools_status(relay: &Relay, token: &str, session: &str) -> u16 {
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    mcp(relay, "POST", Some(token), Some(session), &[], Some(list)).await.status().as_u16()
}

/// `DELETE /mcp` ends the session with 204 (clients take 200 or 204 as success; the SDK under
/// the relay says 202), and then it is gone: another DELETE or a request in it gets 404. The
/// token and `Host` checks come first, and a refused DELETE ends nothing.
#[tokio::test]
async fn deleting_a_2025_era_session_ends_it_with_204_then_it_is_404() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let token = relay.token("mcp-session", "mcp").await.secret;
    let session = open_session(&relay, &token).await;
    assert_eq!(list_tools_status(&relay, &token, &session).await, 200);

    let r = delete(&relay, None, &session, &[]).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (401, json!("unauthenticated")), "{r:?}");
    let r = delete(&relay, Some(&token), &session, &[("host", "evil.example")]).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (403, json!("permission_denied")), "{r:?}");
    assert_eq!(list_tools_status(&relay, &token, &session).await, 200, "a refused DELETE ended the session");

    let r = delete(&relay, Some(&token), &session, &[]).await;
    assert!(r.status == 204 || r.status == 200, "ending an open session: {r:?}");
    assert_eq!(list_tools_status(&relay, &token, &session).await, 404, "the session outlived its DELETE");

    let r = delete(&relay, Some(&token), &session, &[]).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!("not_found")), "again: {r:?}");
    let r = delete(&relay, Some(&token), "no-such-session", &[]).await;
    assert_eq!(r.status, 404, "an unknown session: {r:?}");
}

/// A 2025-era session is its opener's: another token that names it gets 404, as for a session
/// that does not exist, and cannot end it; its opener carries on.
#[tokio::test]
async fn a_session_answers_only_the_token_that_opened_it() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let ada = relay.token("ada", "mcp").await.secret;
    let bob = relay.token("bob", "mcp").await.secret;
    let session = open_session(&relay, &ada).await;
    assert_eq!(list_tools_status(&relay, &bob, &session).await, 404, "another token's session does not exist");
    let r = delete(&relay, Some(&bob), &session, &[]).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!("not_found")), "{r:?}");
    assert_eq!(list_tools_status(&relay, &ada, &session).await, 200, "the opener's session lives on");
    assert_eq!(delete(&relay, Some(&ada), &session, &[]).await.status, 204);
}
