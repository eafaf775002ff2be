//! Background processes through the relay: start, poll, stream with exact resume, input, kill of
//! the whole group, ownership between tokens, adoption after a restart, limits and bad input.
use std::time::Duration;

use hangar_e2e::{
    build_request, envelope, eventually, ext, full_body, host_pid, is_running, pb, pids_with, proc_stat, read_raw,
    relay::{Relay, Sse, StateDir, ADMIN},
    send_http1, wait_until, within, ConnectStream, HasEvent, STEP,
};
use serde_json::{json, Value};

async fn start(relay: &Relay, tok: &str, command: &str) -> Value {
    let r = relay.call("POST", "/api/sandboxes/default/processes", Some(tok), Some(json!({"command": command}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()
}

/// Reads output events until `end`: (text, last id, end payload).
async fn drain(s: &mut Sse) -> (String, Option<String>, Option<Value>) {
    let (mut text, mut last, mut end) = (String::new(), None, None);
    while let Some(e) = s.next(STEP).await {
        match e.event.as_str() {
            "output" => {
                text.push_str(e.json()["data"].as_str().unwrap());
                last = e.id.clone();
            }
            "end" => {
                end = Some(e.json());
                last = e.id.clone();
            }
            other => panic!("unexpected event {other}: {e:?}"),
        }
    }
    (text, last, end)
}

#[tokio::test]
async fn start_stream_and_poll() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let p = start(&relay, ADMIN, "for i in 1 2 3 4 5; do echo line $i; sleep 0.05; done; echo bye >&2; exit 7").await;
    let id = p["process_id"].as_str().unwrap().to_string();
    assert!(p["pid"].as_u64().unwrap() > 0 && p["adopted"] == json!(false), "{p}");

    let mut s = relay.sse("GET", &format!("/api/sandboxes/default/processes/{id}/stream"), Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    let (text, last, end) = drain(&mut s).await;
    assert_eq!(text, "line 1\nline 2\nline 3\nline 4\nline 5\nbye\n");
    let end = end.expect("an end event");
    assert_eq!((end["exit_code"].clone(), end["total"].clone()), (json!(7), json!(text.len())), "{end}");
    assert_eq!(last, Some(text.len().to_string()));

    // Polling: everything, then only what is newer.
    let all = relay.call("GET", &format!("/api/sandboxes/default/processes/{id}"), Some(ADMIN), None).await.json();
    assert_eq!(
        (all["output"].clone(), all["next"].clone(), all["lost"].clone()),
        (json!(text), json!(text.len()), json!(0))
    );
    assert_eq!(
        (all["process"]["state"].clone(), all["process"]["exit_code"].clone()),
        (json!("exited"), json!(7)),
        "{all}"
    );
    let tail =
        relay.call("GET", &format!("/api/sandboxes/default/processes/{id}?since=21"), Some(ADMIN), None).await.json();
    assert_eq!(tail["output"], json!(&text[21..]), "{tail}");

    let list = relay.call("GET", "/api/sandboxes/default/processes", Some(ADMIN), None).await.json();
    let mine: Vec<_> = list["processes"].as_array().unwrap().iter().filter(|x| x["process_id"] == json!(id)).collect();
    assert_eq!(mine.len(), 1, "exited processes stay listed: {list}");
    assert_eq!(mine[0]["state"], json!("exited"));
}

#[tokio::test]
async fn last_event_id_resumes_with_exactly_the_missing_bytes() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let p = start(&relay, ADMIN, "for i in $(seq 1 60); do echo \"line-$i é€\"; sleep 0.02; done").await;
    let id = p["process_id"].as_str().unwrap().to_string();
    let path = format!("/api/sandboxes/default/processes/{id}/stream");
    let mut s = relay.sse("GET", &path, Some(ADMIN), None).await;
    let mut got = String::new();
    let mut last = None;
    while got.matches('\n').count() < 10 {
        let e = s.next(STEP).await.expect("output");
        assert_eq!(e.event, "output");
        got.push_str(e.json()["data"].as_str().unwrap());
        last = e.id.clone();
    }
    drop(s);
    let last = last.unwrap();
    assert_eq!(last.parse::<usize>().unwrap(), got.len(), "the id is the offset after the event's bytes");
    // Reconnect as an EventSource would.
    let req = build_request(
        "GET",
        &path,
        relay.addr,
        false,
        &[("authorization", &format!("Bearer {ADMIN}")), ("last-event-id", &last)],
        full_body(Default::default()),
    );
    let resp = send_http1(relay.addr, req).await;
    assert_eq!(resp.status(), 200);
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
    let mut rest = String::new();
    for block in String::from_utf8_lossy(&body).split("\n\n") {
        if block.contains("event: output") {
            let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            rest.push_str(serde_json::from_str::<Value>(data).unwrap()["data"].as_str().unwrap());
        }
    }
    let expected: String = (1..=60).map(|i| format!("line-{i} é€\n")).collect();
    assert_eq!(format!("{got}{rest}"), expected, "nothing lost, nothing repeated");
    let req = build_request(
        "GET",
        &path,
        relay.addr,
        false,
        &[("authorization", &format!("Bearer {ADMIN}")), ("last-event-id", "not-an-offset")],
        full_body(Default::default()),
    );
    assert_eq!(send_http1(relay.addr, req).await.status(), 400, "a malformed Last-Event-ID is refused");
}

#[tokio::test]
async fn input_reaches_stdin_and_eof_closes_it() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let p = start(&relay, ADMIN, "cat").await;
    let id = p["process_id"].as_str().unwrap().to_string();
    let input = format!("/api/sandboxes/default/processes/{id}/input");
    assert_eq!(relay.call("POST", &input, Some(ADMIN), Some(json!({"input": "hello\n"}))).await.status, 204);
    assert_eq!(
        relay
            .call("POST", &input, Some(ADMIN), Some(json!({"input": "Ynl0ZXMK", "base64": true, "eof": true})))
            .await
            .status,
        204
    );
    let mut s =
        relay.sse("GET", &format!("/api/sandboxes/default/processes/{id}/stream?since=0"), Some(ADMIN), None).await;
    let (text, _, end) = drain(&mut s).await;
    assert_eq!(text, "hello\nbytes\n");
    assert_eq!(end.unwrap()["exit_code"], json!(0));
    let r = relay.call("POST", &input, Some(ADMIN), Some(json!({"input": "late"}))).await;
    assert_eq!(r.status, 400, "stdin is closed: {r:?}");
    let r = relay
        .call("POST", "/api/sandboxes/default/processes", Some(ADMIN), Some(json!({"command": "pwd", "cwd": "../.."})))
        .await;
    assert_eq!(r.status, 400, "a cwd out of the sandbox: {r:?}");
    for bad in [json!({"input": "%%%", "base64": true}), json!({}), json!({"input": "x", "extra": 1})] {
        let r = relay.call("POST", &input, Some(ADMIN), Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
}

#[tokio::test]
async fn kill_reaches_the_whole_process_group() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let marker = format!("hangar-bg-kill-{}", std::process::id());
    let p = start(&relay, ADMIN, &format!("(exec -a {marker} sleep 1000) & exec -a {marker} sleep 1000")).await;
    let id = p["process_id"].as_str().unwrap().to_string();
    wait_until(STEP, "both sleeps run", || pids_with(&marker).len() == 2).await;
    let pids = pids_with(&marker);
    let r = relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(ADMIN), None).await;
    assert_eq!(r.status, 202, "{r:?}");
    wait_until(STEP, "no survivor in the group", || pids.iter().all(|p| !is_running(*p))).await;
    let v = relay.call("GET", &format!("/api/sandboxes/default/processes/{id}"), Some(ADMIN), None).await.json();
    assert_eq!(v["process"]["status"], json!("signal: terminated"), "{v}");
}

#[tokio::test]
async fn a_process_belongs_to_the_token_that_started_it() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let (a, b) = (relay.token("a", "user").await.secret, relay.token("b", "user").await.secret);
    let p = start(&relay, &a, "sleep 30").await;
    let id = p["process_id"].as_str().unwrap().to_string();
    let base = format!("/api/sandboxes/default/processes/{id}");
    let listed = |v: Value| v["processes"].as_array().unwrap().iter().any(|x| x["process_id"] == json!(id));
    assert!(listed(relay.call("GET", "/api/sandboxes/default/processes", Some(&a), None).await.json()));
    assert!(!listed(relay.call("GET", "/api/sandboxes/default/processes", Some(&b), None).await.json()));
    for (method, path, body) in [
        ("GET", base.clone(), None),
        ("GET", format!("{base}/stream"), None),
        ("POST", format!("{base}/input"), Some(json!({"input": "x"}))),
        ("DELETE", base.clone(), None),
    ] {
        let r = relay.call(method, &path, Some(&b), body).await;
        assert_eq!(r.status, 404, "{method} {path} as another token: {r:?}");
    }
    assert_eq!(relay.call("GET", &base, Some(&a), None).await.json()["process"]["state"], json!("running"));
    assert_eq!(relay.call("DELETE", &base, Some(&a), None).await.status, 202);
    for q in ["?since=abc", "?since=-1", "?surprise=1"] {
        let r = relay.call("GET", &format!("{base}{q}"), Some(&a), None).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{q}: {r:?}");
    }
    for bad in ["p_000000000000", "nope", "p_ABCDEF012345"] {
        let r = relay.call("GET", &format!("/api/sandboxes/default/processes/{bad}"), Some(&a), None).await;
        assert_eq!(r.status, 404, "{bad}");
    }
}

/// A sandbox's own daemon, reached straight as a process inside a sandbox that isolates nothing
/// could (where it is isolated the token is out of the sandbox's reach; the MAC still decides):
/// its address and access token, read from the sandbox's directory, and its host pid.
struct Daemon {
    addr: std::net::SocketAddr,
    token: String,
    pid: u32,
}

impl Daemon {
    async fn of(state: &StateDir, relay: &Relay, sandbox: &str) -> Daemon {
        let v = relay.call("GET", &format!("/api/sandboxes/{sandbox}"), Some(ADMIN), None).await.json();
        let id = v["id"].as_str().unwrap_or_else(|| panic!("sandbox {sandbox} without an id: {v}"));
        let dir = state.0.join("sandboxes").join(id);
        let token = std::fs::read_to_string(dir.join("envd.token")).expect("the sandbox's envd.token");
        // The daemon logs its address just after printing it to the relay: wait for the line.
        let addr = eventually(STEP, "the daemon's address in envd.log", || {
            std::fs::read_to_string(dir.join("envd.log"))
                .ok()?
                .split("addr=")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.trim_matches('"').parse().ok())
        })
        .await;
        let token_file = dir.join("envd.token").to_string_lossy().into_owned();
        let pid = state
            .daemons()
            .into_iter()
            .find(|p| hangar_e2e::cmdline(*p).is_some_and(|c| c.contains(&token_file)))
            .expect("the sandbox's daemon");
        Daemon { addr, token: token.trim().to_string(), pid }
    }

    fn request(&self, path: &str, content_type: &str, body: Vec<u8>) -> hyper::Request<hangar_e2e::ReqBody> {
        let headers = [("content-type", content_type), ("x-access-token", self.token.as_str())];
        build_request("POST", path, self.addr, false, &headers, full_body(body.into()))
    }

    /// Starts `cmd args` with `tag` over Connect and returns the pid its start event reports.
    /// envd answers a start that fails with HTTP 200 and the error in the end-of-stream envelope,
    /// so only the start event shows that the process runs.
    async fn start_tagged(&self, cmd: &str, args: &[&str], tag: &str) -> u32 {
        let msg = json!({"process": {"cmd": cmd, "args": args}, "tag": tag}).to_string();
        let req = self.request("/process.Process/Start", "application/connect+json", envelope(0, msg.as_bytes()));
        let mut s =
            ConnectStream::new(within(STEP, "a Start straight to the daemon", send_http1(self.addr, req)).await);
        assert_eq!(s.status, 200, "Start with tag {tag:?}");
        let first = s.next_within(STEP).await.expect("the Start stream").expect("a first envelope");
        assert!(!first.is_end(), "the start with tag {tag:?} failed: {}", first.json());
        let ev: pb::StartResponse = serde_json::from_value(first.json()).expect("a process event");
        match ev.into_event() {
            Some(pb::process_event::Event::Start(st)) => st.pid,
            other => panic!("the first event of the start with tag {tag:?} is not start: {other:?}"),
        }
    }

    /// The daemon's own list of its running processes: (pid, tag).
    async fn running(&self) -> Vec<(u32, Option<String>)> {
        let req =
            self.request("/hangar.envd.v1.Processes/List", "application/json", b"{\"runningOnly\": true}".to_vec());
        let r = read_raw(within(STEP, "the daemon's List", send_http1(self.addr, req)).await).await;
        assert_eq!(r.status, 200, "the daemon's List: {r:?}");
        let list: ext::ListResponse = serde_json::from_slice(&r.body).expect("a ListResponse");
        list.processes.into_iter().map(|p| (p.pid, p.tag)).collect()
    }
}

/// Every process id the relay lists for `tok`.
async fn listed_ids(relay: &Relay, tok: &str) -> Vec<Value> {
    let v = relay.call("GET", "/api/sandboxes/default/processes", Some(tok), None).await.json();
    v["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no process list: {v}"))
        .iter()
        .map(|p| p["process_id"].clone())
        .collect()
}

/// The admin's list holds only `real_id` and the user's nothing; neither can get the forged ids;
/// the forgeries still run.
async fn only_the_real_one_is_seen(relay: &Relay, user: &str, real_id: &str, forged: &[(u32, String)], when: &str) {
    for (name, tok, want) in [("the admin", ADMIN, vec![json!(real_id)]), ("a user", user, vec![])] {
        assert_eq!(listed_ids(relay, tok).await, want, "{name}'s processes {when}");
        for id in ["p_0123456789ab", &format!("{real_id}x")] {
            let r = relay.call("GET", &format!("/api/sandboxes/default/processes/{id}"), Some(tok), None).await;
            assert_eq!(r.status, 404, "{name} asking for {id} {when}: {r:?}");
        }
    }
    for (pid, tag) in forged {
        assert!(is_running(*pid), "the forgery with tag {tag:?} (pid {pid}) ended {when}");
    }
}

/// A process inside the sandbox can start processes with any tag it likes through its daemon;
/// without the relay's key it cannot make one that is a token's. The forgeries run (their start
/// events and /proc say so, and the daemon lists them with their tags), and still no token sees
/// them, before or after a relay restart (when the relay adopts what it finds by tag).
#[tokio::test]
async fn a_tag_made_up_inside_the_sandbox_is_never_adopted() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let daemon = Daemon::of(&state, &relay, "default").await;
    let user = relay.token("a", "user").await.secret;
    let real = start(&relay, ADMIN, "sleep 30").await;
    let real_id = real["process_id"].as_str().expect("a process id").to_string();
    // Forgeries: a made-up MAC, and the real id with another MAC.
    let forged_tags = ["hangar:p_0123456789ab:AAAAAAAAAAAAAAAAAAAAAA".to_string(), format!("hangar:{real_id}x:AAAA")];
    // The daemon reports pids in the sandbox's PID namespace; /proc here has them by host pid.
    let (mut forged, mut on_host) = (Vec::new(), Vec::new());
    for tag in &forged_tags {
        let pid = daemon.start_tagged("/bin/sleep", &["30"], tag).await;
        let host =
            host_pid(daemon.pid, pid).unwrap_or_else(|| panic!("no host process is the forgery {pid} ({tag:?})"));
        forged.push((pid, tag.clone()));
        on_host.push((host, tag.clone()));
    }
    for (pid, tag) in &on_host {
        assert!(is_running(*pid), "the forgery with tag {tag:?} (pid {pid}) does not run: {:?}", proc_stat(*pid));
    }
    let running = daemon.running().await;
    for (pid, tag) in &forged {
        assert!(
            running.contains(&(*pid, Some(tag.clone()))),
            "the daemon does not list {pid} with {tag:?}: {running:?}"
        );
    }

    only_the_real_one_is_seen(&relay, &user, &real_id, &on_host, "before a relay restart").await;
    relay.stop();
    let relay = Relay::start(&state.0, &[]);
    only_the_real_one_is_seen(&relay, &user, &real_id, &on_host, "after a relay restart").await;
    let adopted = relay.call("GET", &format!("/api/sandboxes/default/processes/{real_id}"), Some(ADMIN), None).await;
    assert_eq!(adopted.json()["process"]["adopted"], json!(true), "the real process is adopted: {adopted:?}");
}

#[tokio::test]
async fn after_a_relay_restart_processes_are_adopted_by_their_token() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let a = relay.token("a", "user").await.secret;
    let p = start(&relay, &a, "echo before; sleep 30").await;
    let id = p["process_id"].as_str().unwrap().to_string();
    relay.stop();
    let relay = Relay::start(&state.0, &[]);
    let list = relay.call("GET", "/api/sandboxes/default/processes", Some(&a), None).await.json();
    let found: Vec<_> = list["processes"].as_array().unwrap().iter().filter(|x| x["process_id"] == json!(id)).collect();
    assert_eq!(found.len(), 1, "{list}");
    assert_eq!((found[0]["adopted"].clone(), found[0]["state"].clone()), (json!(true), json!("running")));
    let v = relay.call("GET", &format!("/api/sandboxes/default/processes/{id}"), Some(&a), None).await.json();
    assert_eq!(v["output"], json!("before\n"), "the daemon kept the output: {v}");
    let other = relay.token("b", "user").await.secret;
    let list = relay.call("GET", "/api/sandboxes/default/processes", Some(&other), None).await.json();
    assert_eq!(list["processes"].as_array().unwrap().len(), 0, "{list}");
    assert_eq!(
        relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(&a), None).await.status,
        202
    );
}

#[tokio::test]
async fn background_processes_per_token_are_limited() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_BACKGROUND_MAX_PER_TOKEN", "2")]);
    relay.share_default().await;
    let a = relay.token("a", "user").await.secret;
    start(&relay, &a, "sleep 30").await;
    let second = start(&relay, &a, "sleep 30").await;
    let r =
        relay.call("POST", "/api/sandboxes/default/processes", Some(&a), Some(json!({"command": "sleep 30"}))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (429, json!("resource_exhausted")), "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("HANGAR_BACKGROUND_MAX_PER_TOKEN"));
    // Another token has its own allowance.
    let b = relay.token("b", "user").await.secret;
    start(&relay, &b, "sleep 30").await;
    // A finished process frees its place.
    let id = second["process_id"].as_str().unwrap();
    relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(&a), None).await;
    let mut started = false;
    for _ in 0..50 {
        let r = relay
            .call("POST", "/api/sandboxes/default/processes", Some(&a), Some(json!({"command": "sleep 30"})))
            .await;
        if r.status == 201 {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "a killed process no longer counts");
}

/// The limit holds when the starts come all at once: of twelve concurrent starts from one token,
/// exactly `HANGAR_BACKGROUND_MAX_PER_TOKEN` run and the rest are refused. A limit that counts the
/// running processes and then starts one, without holding anything in between, lets them all in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_stay_within_the_per_token_limit() {
    const LIMIT: usize = 3;
    const STARTS: usize = 12;
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_BACKGROUND_MAX_PER_TOKEN", &LIMIT.to_string())]);
    relay.share_default().await;
    let a = relay.token("a", "user").await.secret;
    let body = json!({"command": "sleep 30"});
    let answers = futures::future::join_all(
        (0..STARTS).map(|_| relay.call("POST", "/api/sandboxes/default/processes", Some(&a), Some(body.clone()))),
    )
    .await;
    let started: Vec<String> = answers
        .iter()
        .filter(|r| r.status == 201)
        .map(|r| r.json()["process_id"].as_str().expect("a started process's id").to_string())
        .collect();
    let listed = relay.call("GET", "/api/sandboxes/default/processes", Some(&a), None).await.json();
    let processes = listed["processes"].as_array().expect("a process list");
    let running = processes.iter().filter(|p| p["state"] == "running").count();
    for id in &started {
        let r = relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(&a), None).await;
        assert_eq!(r.status, 202, "killing {id}: {r:?}");
    }

    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert_eq!(started.len(), LIMIT, "{STARTS} concurrent starts with a limit of {LIMIT}: {statuses:?}");
    assert_eq!(running, LIMIT, "running processes of the token after the starts");
    for r in answers.iter().filter(|r| r.status != 201) {
        let error = &r.json()["error"];
        assert_eq!((r.status, error["code"].clone()), (429, json!("resource_exhausted")), "{r:?}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("HANGAR_BACKGROUND_MAX_PER_TOKEN"), "the refusal names the setting: {r:?}");
    }
}

/// A quiet stream still sends an SSE comment every 15 s, so proxies keep the connection open.
#[tokio::test]
async fn a_quiet_stream_sends_a_comment_every_15_seconds() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let p = start(&relay, ADMIN, "sleep 60").await;
    let id = p["process_id"].as_str().unwrap();
    let req = build_request(
        "GET",
        &format!("/api/sandboxes/default/processes/{id}/stream"),
        relay.addr,
        false,
        &[("authorization", &format!("Bearer {ADMIN}"))],
        full_body(Default::default()),
    );
    let mut body = send_http1(relay.addr, req).await.into_body();
    let started = std::time::Instant::now();
    let mut seen = String::new();
    let comment = tokio::time::timeout(Duration::from_secs(25), async {
        while let Some(Ok(frame)) = http_body_util::BodyExt::frame(&mut body).await {
            if let Ok(d) = frame.into_data() {
                seen.push_str(&String::from_utf8_lossy(&d));
                if seen.lines().any(|l| l.starts_with(':')) {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(comment, Ok(true), "no SSE comment within 25 s; got {seen:?}");
    assert!(started.elapsed() >= Duration::from_secs(14), "the comment comes after 15 s of quiet, not at once");
    relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(ADMIN), None).await;
}

/// A tag is no secret inside the sandbox (the daemon lists it), and once its process has exited
/// a process inside could start another with the very same tag. It is not the one the relay
/// started (the relay knows that one's pid), so it is nobody's: the token still sees its own
/// exited process, its output, and nothing of the imitation.
#[tokio::test]
async fn a_real_tag_reused_after_its_process_exited_is_nobody_s() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let daemon = Daemon::of(&state, &relay, "default").await;
    let real = start(&relay, ADMIN, "echo real").await;
    let id = real["process_id"].as_str().expect("a process id").to_string();
    let path = format!("/api/sandboxes/default/processes/{id}");
    let mut exited = Value::Null;
    // The exit is known when the process is reaped, its last output when the pipe is read to its
    // end: wait for both.
    for _ in 0..100 {
        exited = relay.call("GET", &path, Some(ADMIN), None).await.json();
        if exited["process"]["state"] == json!("exited") && exited["output"] == json!("real\n") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((exited["process"]["state"].clone(), exited["output"].clone()), (json!("exited"), json!("real\n")));
    // The real tag, as anything inside the sandbox can read it from the daemon.
    let req = daemon.request("/hangar.envd.v1.Processes/List", "application/json", b"{}".to_vec());
    let r = read_raw(within(STEP, "the daemon's List", send_http1(daemon.addr, req)).await).await;
    let list: ext::ListResponse = serde_json::from_slice(&r.body).expect("a ListResponse");
    let tag = list
        .processes
        .iter()
        .filter_map(|p| p.tag.clone())
        .find(|t| t.starts_with(&format!("hangar:{id}:")))
        .expect("the real process's tag");
    let forged = daemon.start_tagged("/bin/sh", &["-c", "echo forged; exec sleep 30"], &tag).await;

    let v = relay.call("GET", &path, Some(ADMIN), None).await.json();
    assert_eq!(v["process"]["state"], json!("exited"), "still the real, exited one: {v}");
    assert_eq!(v["output"], json!("real\n"), "{v}");
    let listed = relay.call("GET", "/api/sandboxes/default/processes", Some(ADMIN), None).await.json();
    let states: Vec<Value> =
        listed["processes"].as_array().map(|a| a.iter().map(|p| p["state"].clone()).collect()).unwrap_or_default();
    assert_eq!(states, vec![json!("exited")], "only the real process is listed: {listed}");
    let mut s = relay.sse("GET", &format!("{path}/stream"), Some(ADMIN), None).await;
    let events = s.collect(STEP).await;
    let out: String = events
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| e.json()["data"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(out, "real\n", "the stream is the real process's: {events:?}");
    // Killing it reaches nothing of the imitation.
    assert_eq!(relay.call("DELETE", &path, Some(ADMIN), None).await.status, 202);
    let host = host_pid(daemon.pid, forged).expect("the imitation runs");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(is_running(host), "the imitation is nobody's: the token's kill does not reach it");
    // SAFETY: kill(2) on the test's own imitation, by its host pid.
    unsafe { libc::kill(host as i32, libc::SIGKILL) };
}
