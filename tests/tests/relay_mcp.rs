//! The relay's MCP endpoint over raw HTTP, where the status is what is tested (the SDKs hide
//! it): ending a 2025-era session.
use hangar_e2e::{
    mcp::{open_session, request as mcp},
    read_raw,
    relay::{Relay, StateDir},
    RawResponse,
};
use serde_json::json;

async fn delete(relay: &Relay, token: Option<&str>, session: &str, extra: &[(&str, &str)]) -> RawResponse {
    read_raw(mcp(relay, "DELETE", token, Some(session), extra, None).await).await
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
