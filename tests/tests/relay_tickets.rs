//! Tickets for browsers: `POST /api/tickets` gives a one-use ticket, bound to its token and to
//! one event stream's path, that a `GET` of that stream sends as `?ticket=` instead of the bearer
//! header (which `EventSource` cannot set). Used, expired, for another path, unknown, from a
//! revoked token, on a POST or on a route that is no stream: 401 saying which. The ticket never
//! reaches the relay's log.
use std::time::Duration;

use hangar_e2e::{
    relay::{Relay, StateDir, ADMIN},
    STEP,
};
use serde_json::{json, Value};

/// A ticket for `path`, asked with `token`.
async fn ticket(relay: &Relay, token: &str, path: &str) -> String {
    let r = relay.call("POST", "/api/tickets", Some(token), Some(json!({ "path": path }))).await;
    assert_eq!(r.status, 201, "{path}: {r:?}");
    let v = r.json();
    assert_eq!(v["path"], json!(path), "{v}");
    assert!(v["expires_at"].as_f64().is_some_and(|t| t > 1.7e9), "{v}");
    v["ticket"].as_str().unwrap_or_else(|| panic!("no ticket: {v}")).to_string()
}

/// A GET without a token: its status and its error message (empty for a success).
async fn get(relay: &Relay, path_and_query: &str) -> (u16, String) {
    let r = relay.call("GET", path_and_query, None, None).await;
    let message = if r.status == 200 { String::new() } else { r.json()["error"]["message"].to_string() };
    if r.status == 401 {
        assert_eq!(r.json()["error"]["code"], json!("unauthenticated"), "{r:?}");
    }
    (r.status, message)
}

fn logged(relay: &Relay, tickets: &[String]) {
    let log = relay.log();
    assert!(log.contains("ticket_issued"), "tickets are logged as issued: {log}");
    for t in tickets {
        assert!(!log.contains(t.as_str()), "the relay's log shows a ticket: {log}");
    }
}

#[tokio::test]
async fn a_ticket_opens_its_stream_once() {
    let state = StateDir::new();
    // Debug logging too must not show a ticket.
    let relay = Relay::start(&state.0, &[("HANGAR_LOG", "debug")]);
    relay.share_default().await;
    let user = relay.token("browser", "user").await;
    let mut issued = Vec::new();

    // A watch, with its own parameters left as they were.
    let watch = "/api/sandboxes/default/watch";
    let t = ticket(&relay, &user.secret, watch).await;
    issued.push(t.clone());
    let mut s = relay.sse("GET", &format!("{watch}?path=.&ticket={t}&recursive=true"), None, None).await;
    assert_eq!(s.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = relay
        .call(
            "POST",
            "/api/sandboxes/default/exec",
            Some(ADMIN),
            Some(json!({"command": "mkdir -p t/u && touch t/u/f"})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let change = s.next(STEP).await.expect("a change");
    assert_eq!((change.event.as_str(), change.json()["name"].clone()), ("change", json!("t")), "{change:?}");
    drop(s);

    // Used: once, whatever the answer.
    let (status, message) = get(&relay, &format!("{watch}?path=.&ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("already used") && !message.contains(&t), "{message}");

    // A process's stream, as the token that started it.
    let r = relay
        .call("POST", "/api/sandboxes/default/processes", Some(&user.secret), Some(json!({"command": "echo hi"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["process_id"].as_str().expect("process id").to_string();
    let stream = format!("/api/sandboxes/default/processes/{id}/stream");
    let t = ticket(&relay, &user.secret, &stream).await;
    issued.push(t.clone());
    let mut s = relay.sse("GET", &format!("{stream}?ticket={t}&since=0"), None, None).await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    let text: String = events
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| e.json()["data"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(text, "hi\n", "{events:?}");

    // Another path uses it up.
    let t = ticket(&relay, &user.secret, &stream).await;
    issued.push(t.clone());
    let (status, message) = get(&relay, &format!("{watch}?path=.&ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("not for this path"), "{message}");
    let (status, message) = get(&relay, &format!("{stream}?ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("already used"), "{message}");

    // Unknown, or two of them.
    for q in ["ticket=hgt_0123456789abcdef_nope", "ticket=", "ticket=a&ticket=b"] {
        let (status, message) = get(&relay, &format!("{watch}?path=.&{q}")).await;
        assert_eq!(status, 401, "{q}: {message}");
    }

    // Only a GET of a stream: not a POST, not another route.
    let t = ticket(&relay, &user.secret, watch).await;
    issued.push(t.clone());
    let r = relay
        .call("POST", &format!("/api/sandboxes/default/exec?ticket={t}"), None, Some(json!({"command": "true"})))
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    let (status, message) = get(&relay, &format!("/api/sandboxes?ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("only a GET of one of the event streams"), "{message}");
    // Neither used it up.
    let s = relay.sse("GET", &format!("{watch}?path=.&ticket={t}"), None, None).await;
    assert_eq!(s.status, 200);
    drop(s);

    // A revoked token's tickets open nothing.
    let gone = relay.token("gone", "user").await;
    let t = ticket(&relay, &gone.secret, watch).await;
    issued.push(t.clone());
    assert_eq!(relay.call("DELETE", &format!("/api/tokens/{}", gone.id), Some(ADMIN), None).await.status, 204);
    let (status, message) = get(&relay, &format!("{watch}?path=.&ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("revoked"), "{message}");

    // The route's scope still applies: tickets of a jobs token are for its jobs' streams.
    let jobs = relay.token("pipeline", "jobs").await;
    let r = relay.call("POST", "/api/tickets", Some(&jobs.secret), Some(json!({ "path": watch }))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (403, json!("permission_denied")), "{r:?}");

    logged(&relay, &issued);
}

/// A ticket only for a stream that is there for its token: a path its stream would answer 404
/// (a way up spelled into a process id, a sandbox, process, session or job that does not exist,
/// another token's process, a job of no pipeline's) gets that 404 and no ticket.
#[tokio::test]
async fn no_ticket_for_a_stream_that_is_not_there() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let mine = relay.token("mine", "user").await;
    let theirs = relay.token("theirs", "user").await;
    let r = relay
        .call("POST", "/api/sandboxes/default/processes", Some(&theirs.secret), Some(json!({"command": "sleep 30"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["process_id"].as_str().expect("process id").to_string();
    let theirs_stream = format!("/api/sandboxes/default/processes/{id}/stream");
    let paths = [
        ("/api/sandboxes/default/processes/..%2f..%2f/stream", "../../"),
        ("/api/sandboxes/default/processes/p_000000000000/stream", "p_000000000000"),
        (theirs_stream.as_str(), id.as_str()),
        ("/api/sandboxes/nope/processes/p_000000000000/stream", "nope"),
        ("/api/sandboxes/nope/watch", "nope"),
        ("/api/sessions/nope/events/stream", "nope"),
        ("/api/jobs/job_nope/events/stream", "job_nope"),
    ];
    for (path, named) in paths {
        let r = relay.call("POST", "/api/tickets", Some(&mine.secret), Some(json!({ "path": path }))).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!("not_found")), "{path}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(named), "{path}: the message names {named:?}: {message}");
        // What the stream itself answers.
        let r = relay.call("GET", path, Some(&mine.secret), None).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
    }
    let jobs = relay.token("pipeline", "jobs").await;
    let r = relay
        .call("POST", "/api/tickets", Some(&jobs.secret), Some(json!({ "path": "/api/jobs/job_1/events/stream" })))
        .await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!("not_found")), "{r:?}");
    // The owner's ticket is issued.
    let r = relay.call("POST", "/api/tickets", Some(&theirs.secret), Some(json!({ "path": theirs_stream }))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let log = relay.log();
    assert_eq!(log.matches("ticket_issued").count(), 1, "one ticket issued, the owner's: {log}");
}

#[tokio::test]
async fn tickets_are_only_for_streams() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    for path in [
        "/api/sandboxes/default/exec/stream",
        "/api/sandboxes",
        "/api/sessions/x/events",
        "/api/sandboxes/default/watch?path=.",
        "/api/sandboxes//watch",
        "",
    ] {
        let r = relay.call("POST", "/api/tickets", Some(ADMIN), Some(json!({ "path": path }))).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{path}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains("/api/sandboxes/{sandbox}/watch"), "the message lists the streams: {message}");
    }
    for body in [json!({}), json!({"path": "/api/sandboxes/default/watch", "ttl": 5})] {
        assert_eq!(relay.call("POST", "/api/tickets", Some(ADMIN), Some(body)).await.status, 400);
    }
    assert_eq!(
        relay.call("POST", "/api/tickets", None, Some(json!({"path": "/api/sandboxes/default/watch"}))).await.status,
        401
    );
    // With a bearer header a ticket is not read: it is an unknown parameter.
    let r = relay.call("GET", "/api/sandboxes/default/watch?path=.&ticket=hgt_x_y", Some(ADMIN), None).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!String::from_utf8_lossy(&r.body).contains("hgt_x_y"), "{r:?}");
}

#[tokio::test]
async fn tickets_expire() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_TICKET_SECONDS", "1")]);
    let watch = "/api/sandboxes/default/watch";
    let r = relay.call("POST", "/api/tickets", Some(ADMIN), Some(json!({ "path": watch }))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let v: Value = r.json();
    let t = v["ticket"].as_str().expect("ticket").to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    assert!((v["expires_at"].as_f64().expect("expires_at") - now - 1.0).abs() < 0.5, "{v}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, message) = get(&relay, &format!("{watch}?path=.&ticket={t}")).await;
    assert_eq!(status, 401);
    assert!(message.contains("expired"), "{message}");
    logged(&relay, &[t]);
}
