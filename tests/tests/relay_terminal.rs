//! Terminals through the relay: `GET /api/sandboxes/{ref}/terminal` upgraded to a WebSocket, a
//! PTY in the sandbox through its daemon. Typed input, its output, resizing seen by `stty size`,
//! the agent user, the exit code; refused before the upgrade for who may not enter the sandbox;
//! a ticket for browsers; revocation, and the client going, end it and kill its program.
use futures::{SinkExt as _, StreamExt as _};
use hangar_e2e::{
    is_root, is_running, pids_with,
    relay::{Relay, StateDir, Token, ADMIN},
    wait_until, within, STEP,
};
use serde_json::{json, Value};
use tokio_tungstenite::{
    tungstenite::{client::IntoClientRequest as _, http, Message},
    WebSocketStream,
};

type Socket = WebSocketStream<tokio::net::TcpStream>;

fn marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    format!("hangar-term-{tag}-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

/// Opens the terminal at `path_and_query` with `token` as a bearer header (none: the query
/// carries a ticket): the socket, or the status and JSON body of the refusal.
async fn open(relay: &Relay, path_and_query: &str, token: Option<&str>) -> Result<Socket, (u16, Value)> {
    let mut req = format!("ws://{}{path_and_query}", relay.addr).into_client_request().expect("a request");
    if let Some(t) = token {
        req.headers_mut().insert(http::header::AUTHORIZATION, format!("Bearer {t}").parse().expect("a header"));
    }
    let tcp = tokio::net::TcpStream::connect(relay.addr).await.expect("connecting to the relay");
    match within(STEP, "the upgrade", tokio_tungstenite::client_async(req, tcp)).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let body = r.body().as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(Value::Null);
            Err((r.status().as_u16(), body))
        }
        Err(e) => panic!("the upgrade failed: {e}"),
    }
}

async fn type_in(socket: &mut Socket, text: &str) {
    socket.send(Message::Binary(text.as_bytes().to_vec().into())).await.expect("sending input");
}

/// What the terminal wrote from now until `want` is in it (its control messages apart).
async fn read_until(socket: &mut Socket, want: &str) -> String {
    let mut out = String::new();
    within(STEP, &format!("{want:?} in the terminal"), async {
        while !out.contains(want) {
            match socket.next().await {
                Some(Ok(Message::Binary(b))) => out.push_str(&String::from_utf8_lossy(&b)),
                Some(Ok(Message::Text(t))) => panic!("a control message before {want:?}: {t} (after {out:?})"),
                Some(Ok(_)) => {}
                other => panic!("the terminal ended before {want:?}: {other:?} (after {out:?})"),
            }
        }
    })
    .await;
    out
}

/// The control message that ends the terminal, after any output, then the close.
async fn last_message(socket: &mut Socket) -> Value {
    let v = within(STEP, "the terminal's end", async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(t))) => break serde_json::from_str::<Value>(t.as_str()).expect("JSON"),
                Some(Ok(_)) => {}
                other => panic!("the terminal ended without saying why: {other:?}"),
            }
        }
    })
    .await;
    let closed = within(STEP, "the close", async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(_))) | None => break true,
                Some(Ok(Message::Binary(_))) => {}
                other => break matches!(other, Some(Err(_))),
            }
        }
    })
    .await;
    assert!(closed, "the socket closes after {v}");
    v
}

#[tokio::test]
async fn a_terminal_runs_a_login_shell_as_the_agent_resizes_and_ends_with_the_exit_code() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let agent =
        relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": "id -un"}))).await;
    let agent = agent.json()["stdout"].as_str().expect("id -un's output").trim().to_string();
    if is_root() {
        assert_ne!(agent, "root", "as root the default sandbox is isolated: its agent is not root");
    }

    let mut t = open(&relay, "/api/sandboxes/default/terminal?cols=100&rows=30", Some(ADMIN)).await.expect("opened");
    // `$((6*7))` is echoed as typed: only the shell's output says 42.
    type_in(&mut t, "tty; stty size; echo \"user=$(id -un)\"; echo done-$((6*7))\r").await;
    let out = read_until(&mut t, "done-42").await;
    assert!(out.contains("/dev/pts/"), "a terminal: {out:?}");
    assert!(out.contains("30 100"), "the size asked for: {out:?}");
    assert!(out.contains(&format!("user={agent}")), "runs as the agent ({agent}): {out:?}");

    t.send(Message::Text(json!({"resize": {"cols": 132, "rows": 50}}).to_string().into())).await.expect("resize");
    type_in(&mut t, "stty size\r").await;
    read_until(&mut t, "50 132").await;

    // A size no terminal has is said, and the terminal goes on.
    t.send(Message::Text(json!({"resize": {"cols": 0, "rows": 50}}).to_string().into())).await.expect("resize");
    let said = within(STEP, "the error", async {
        loop {
            if let Some(Ok(Message::Text(t))) = t.next().await {
                break serde_json::from_str::<Value>(t.as_str()).expect("JSON");
            }
        }
    })
    .await;
    assert!(said["error"].as_str().is_some_and(|e| e.contains("0 by 50")), "{said}");

    type_in(&mut t, "exit 7\r").await;
    assert_eq!(last_message(&mut t).await, json!({"exit": 7}));

    // A command instead of the shell, its words as they are; its exit code.
    let argv = serde_json::to_string(&["bash", "-c", "printf '%s|' \"$@\"; exit 3", "x", "a b", "$HOME"]).unwrap();
    let q = format!("/api/sandboxes/default/terminal?argv={}", urlencode(&argv));
    let mut t = open(&relay, &q, Some(ADMIN)).await.expect("opened");
    read_until(&mut t, "a b|$HOME|").await;
    assert_eq!(last_message(&mut t).await, json!({"exit": 3}));
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[tokio::test]
async fn who_may_not_enter_is_refused_before_the_upgrade_and_bad_requests_are_said() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let Token { secret, .. } = relay.token("outsider", "user").await;
    // The default sandbox is the admins' until shared.
    let (status, body) = open(&relay, "/api/sandboxes/default/terminal", Some(&secret)).await.expect_err("refused");
    assert_eq!((status, body["error"]["code"].clone()), (403, json!("permission_denied")), "{body}");
    let r = relay
        .call("POST", "/api/tickets", Some(&secret), Some(json!({"path": "/api/sandboxes/default/terminal"})))
        .await;
    assert_eq!(r.status, 403, "no ticket into a sandbox the caller may not enter: {r:?}");
    let (status, _) = open(&relay, "/api/sandboxes/nope/terminal", Some(ADMIN)).await.expect_err("refused");
    assert_eq!(status, 404);
    let (status, _) = open(&relay, "/api/sandboxes/default/terminal", None).await.expect_err("refused");
    assert_eq!(status, 401);
    let (status, body) =
        open(&relay, "/api/sandboxes/default/terminal?cols=5000", Some(ADMIN)).await.expect_err("refused");
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("invalid_argument")), "{body}");
    let (status, body) =
        open(&relay, "/api/sandboxes/default/terminal?argv=ls", Some(ADMIN)).await.expect_err("refused");
    assert!(status == 400 && body["error"]["message"].as_str().unwrap().contains("JSON array"), "{body}");
    // Not a WebSocket: said as the API's error.
    let r = relay.call("GET", "/api/sandboxes/default/terminal", Some(ADMIN), None).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("WebSocket"), "{r:?}");
}

#[tokio::test]
async fn a_ticket_opens_it_and_revocation_ends_it_and_kills_its_program() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let Token { id, secret } = relay.token("browser", "user").await;
    let path = "/api/sandboxes/default/terminal";
    let r = relay.call("POST", "/api/tickets", Some(&secret), Some(json!({ "path": path }))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let ticket = r.json()["ticket"].as_str().expect("a ticket").to_string();
    let mut t = open(&relay, &format!("{path}?ticket={ticket}&cols=90"), None).await.expect("opened by the ticket");
    // One use.
    let (status, _) = open(&relay, &format!("{path}?ticket={ticket}"), None).await.expect_err("used");
    assert_eq!(status, 401);

    let m = marker("revoke");
    type_in(&mut t, &format!("echo ready; exec -a {m} sleep 300\r")).await;
    read_until(&mut t, "ready\r\n").await;
    wait_until(STEP, "the terminal's program runs", || !pids_with(&m).is_empty()).await;
    let running = pids_with(&m);
    assert_eq!(relay.call("DELETE", &format!("/api/tokens/{id}"), Some(ADMIN), None).await.status, 204);
    let end = last_message(&mut t).await;
    assert_eq!(end["closed"], json!("revoked"), "{end}");
    wait_until(STEP, "the terminal's program is killed", || running.iter().all(|p| !is_running(*p))).await;
    let metrics = relay.call("GET", "/metrics", Some(ADMIN), None).await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(text.contains(r#"hangar_streams{kind="terminal",reason="revoked"} 1"#), "{text}");
}

#[tokio::test]
async fn a_client_that_goes_takes_the_program_with_it_and_a_pause_ends_it() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let m = marker("gone");
    let mut t = open(&relay, "/api/sandboxes/default/terminal", Some(ADMIN)).await.expect("opened");
    type_in(&mut t, &format!("echo ready; exec -a {m} sleep 300\r")).await;
    read_until(&mut t, "ready\r\n").await;
    wait_until(STEP, "the terminal's program runs", || !pids_with(&m).is_empty()).await;
    let running = pids_with(&m);
    drop(t);
    wait_until(STEP, "the program of a terminal whose client went is killed", || {
        running.iter().all(|p| !is_running(*p))
    })
    .await;

    let mut t = open(&relay, "/api/sandboxes/default/terminal", Some(ADMIN)).await.expect("opened");
    type_in(&mut t, "echo ready\r").await;
    read_until(&mut t, "ready\r\n").await;
    assert_eq!(relay.call("POST", "/api/sandboxes/default/pause", Some(ADMIN), None).await.status, 200);
    assert_eq!(last_message(&mut t).await["closed"], json!("paused"));
}

#[tokio::test]
async fn a_terminal_is_capped_in_bytes_and_counted_against_the_stream_limits() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_STREAM_MAX_BYTES", "20000"), ("HANGAR_STREAM_MAX_PER_TOKEN", "1")]);
    let mut t = open(&relay, "/api/sandboxes/default/terminal", Some(ADMIN)).await.expect("opened");
    // The token's one stream is open: a second terminal is refused before the upgrade.
    let (status, body) = open(&relay, "/api/sandboxes/default/terminal", Some(ADMIN)).await.expect_err("refused");
    assert_eq!((status, body["error"]["code"].clone()), (429, json!("resource_exhausted")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("HANGAR_STREAM_MAX_PER_TOKEN"), "{body}");

    let m = marker("cap");
    type_in(&mut t, &format!("(exec -a {m} sleep 300 &)\r")).await;
    wait_until(STEP, "the terminal's background program runs", || !pids_with(&m).is_empty()).await;
    type_in(&mut t, "yes | head -c 100000\r").await;
    let end = last_message(&mut t).await;
    assert_eq!(end["closed"], json!("max_bytes"), "{end}");
    wait_until(STEP, "a capped terminal's program is killed", || pids_with(&m).is_empty()).await;
}

#[tokio::test]
async fn a_relay_that_stops_ends_its_terminals_with_shutdown() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    let mut t = open(&relay, "/api/sandboxes/default/terminal", Some(ADMIN)).await.expect("opened");
    type_in(&mut t, "echo ready\r").await;
    read_until(&mut t, "ready\r\n").await;
    // SAFETY: kill(2) on the relay this test started.
    unsafe { libc::kill(relay.pid() as i32, libc::SIGTERM) };
    assert_eq!(last_message(&mut t).await["closed"], json!("shutdown"));
    relay.stop();
}
