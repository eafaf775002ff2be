//! The relay's streams: directory watches, the limits, and every reason a stream ends (revoked,
//! paused, destroyed, shutdown, lifetime, max bytes), with the metrics that count them.
use std::time::{Duration, Instant};

use hangar_e2e::{
    is_running, pids_with,
    relay::{Relay, Sse, StateDir, Token, ADMIN},
    wait_until, STEP,
};
use serde_json::{json, Value};

/// A name no other test's process has.
fn marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    format!("hangar-{tag}-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

async fn exec_stream(relay: &Relay, tok: &str, command: &str) -> Sse {
    let s = relay.sse("POST", "/api/sandboxes/default/exec/stream", Some(tok), Some(json!({"command": command}))).await;
    assert_eq!(s.status, 200);
    s
}

/// Reads to the end; returns the last event.
async fn last_event(s: &mut Sse) -> hangar_e2e::relay::SseEvent {
    let all = s.collect(STEP).await;
    all.last().cloned().expect("at least one event")
}

async fn workdir(relay: &Relay) -> std::path::PathBuf {
    let v = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    std::path::PathBuf::from(v["workdir"].as_str().unwrap())
}

#[tokio::test]
async fn a_watch_streams_changes_with_sequence_ids() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let work = workdir(&relay).await;
    std::fs::create_dir_all(work.join("src")).unwrap();
    let mut s = relay.sse("GET", "/api/sandboxes/default/watch?path=src&recursive=true", Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    let mut seen: Vec<Value> = Vec::new();
    // One step at a time, each seen before the next, so the test does not race the new
    // directory's own watch.
    async fn until(s: &mut Sse, seen: &mut Vec<Value>, name: &str, kind: &str) {
        while !seen.iter().any(|e| e["name"] == json!(name) && e["type"] == json!(kind)) {
            let e = s.next(STEP).await.unwrap_or_else(|| panic!("the stream ended before {kind} {name}"));
            assert_eq!(e.event, "change", "{e:?}");
            let v = e.json();
            assert_eq!(e.id, Some(v["seq"].to_string()), "the SSE id is the sequence number");
            // Times are epoch seconds, as numbers, everywhere in the API.
            let ts = v["ts"].as_f64().unwrap_or_else(|| panic!("ts is a number: {v}"));
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
            assert!((now - ts).abs() < 60.0, "ts {ts} is now: {v}");
            seen.push(v);
        }
    }
    std::fs::create_dir(work.join("src/deep")).unwrap();
    until(&mut s, &mut seen, "deep", "create").await;
    std::fs::write(work.join("src/deep/a.rs"), b"fn main() {}").unwrap();
    until(&mut s, &mut seen, "deep/a.rs", "write").await;
    std::fs::remove_file(work.join("src/deep/a.rs")).unwrap();
    until(&mut s, &mut seen, "deep/a.rs", "remove").await;
    let has = |name: &str, kind: &str| seen.iter().any(|e| e["name"] == json!(name) && e["type"] == json!(kind));
    assert!(has("deep", "create") && has("deep/a.rs", "create") && has("deep/a.rs", "write"), "{seen:?}");
    let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test]
async fn a_watch_stays_inside_a_local_sandbox() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let work = workdir(&relay).await;
    std::os::unix::fs::symlink("/etc", work.join("out")).unwrap();
    // `..` is the sandbox's own files (its work directory and home); above them is out.
    for bad in ["../..", "../../..", "/etc", "out", "a/../../..", ""] {
        let r = relay.call("GET", &format!("/api/sandboxes/default/watch?path={bad}"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{bad:?}: {r:?}");
    }
    let r = relay.call("GET", "/api/sandboxes/default/watch?path=missing", Some(ADMIN), None).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = relay.call("GET", "/api/sandboxes/default/watch", Some(ADMIN), None).await;
    assert_eq!(r.status, 400, "{r:?}");
}

#[tokio::test]
async fn limits_answer_429_and_name_the_limit() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_STREAM_MAX_PER_TOKEN", "2"), ("HANGAR_WATCH_MAX_PER_TOKEN", "1")]);
    relay.share_default().await;
    let a = relay.token("a", "user").await.secret;
    let _w = relay.sse("GET", "/api/sandboxes/default/watch?path=.", Some(&a), None).await;
    let r = relay.call("GET", "/api/sandboxes/default/watch?path=.", Some(&a), None).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("HANGAR_WATCH_MAX_PER_TOKEN"));
    let _e = exec_stream(&relay, &a, "sleep 30").await;
    let r = relay.call("POST", "/api/sandboxes/default/exec/stream", Some(&a), Some(json!({"command": "true"}))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (429, json!("resource_exhausted")), "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("HANGAR_STREAM_MAX_PER_TOKEN"));
    // Another token has its own allowance; a closed stream frees its place.
    let b = relay.token("b", "user").await.secret;
    let mut other = exec_stream(&relay, &b, "echo ok").await;
    assert_eq!(last_event(&mut other).await.event, "result");
    drop(_e);
    let mut ok = false;
    for _ in 0..50 {
        let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&a), Some(json!({"command": "true"}))).await;
        let s =
            relay.sse("POST", "/api/sandboxes/default/exec/stream", Some(&a), Some(json!({"command": "true"}))).await;
        assert_eq!(r.status, 200);
        if s.status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the dropped stream's place is free again");

    let state2 = StateDir::new();
    let relay2 = Relay::start(&state2.0, &[("HANGAR_STREAM_MAX_TOTAL", "1")]);
    relay2.share_default().await;
    let _one = exec_stream(&relay2, ADMIN, "sleep 30").await;
    let c = relay2.token("c", "user").await.secret;
    let r = relay2.call("POST", "/api/sandboxes/default/exec/stream", Some(&c), Some(json!({"command": "true"}))).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("HANGAR_STREAM_MAX_TOTAL"));
}

#[tokio::test]
async fn revoking_a_token_ends_its_streams_and_kills_what_it_started() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let Token { id, secret } = relay.token("doomed", "user").await;
    let m = marker("revoke");
    let mut ex = exec_stream(&relay, &secret, &format!("echo go; exec -a {m}-exec sleep 300")).await;
    assert_eq!(ex.next(STEP).await.unwrap().event, "stdout");
    let p = relay
        .call(
            "POST",
            "/api/sandboxes/default/processes",
            Some(&secret),
            Some(json!({"command": format!("exec -a {m}-bg sleep 300")})),
        )
        .await
        .json();
    let pid = p["process_id"].as_str().unwrap().to_string();
    let mut attach =
        relay.sse("GET", &format!("/api/sandboxes/default/processes/{pid}/stream"), Some(&secret), None).await;
    assert_eq!(attach.status, 200);
    wait_until(STEP, "both commands run", || {
        !pids_with(&format!("{m}-exec")).is_empty() && !pids_with(&format!("{m}-bg")).is_empty()
    })
    .await;
    let running: Vec<u32> = pids_with(&m);

    assert_eq!(relay.call("DELETE", &format!("/api/tokens/{id}"), Some(ADMIN), None).await.status, 204);
    let result = last_event(&mut ex).await;
    assert_eq!((result.event.as_str(), result.json()["closed"].clone()), ("result", json!("revoked")), "{result:?}");
    let close = last_event(&mut attach).await;
    assert_eq!((close.event.as_str(), close.json()["reason"].clone()), ("close", json!("revoked")), "{close:?}");
    wait_until(Duration::from_secs(10), "the streamed command and the background process are killed", || {
        running.iter().all(|p| !is_running(*p))
    })
    .await;
    let metrics = relay.call("GET", "/metrics", Some(ADMIN), None).await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(text.contains(r#"hangar_streams{kind="exec",reason="revoked"} 1"#), "{text}");
    assert!(text.contains(r#"hangar_streams{kind="process",reason="revoked"} 1"#), "{text}");
}

#[tokio::test]
async fn pause_and_destroy_end_streams_with_their_reasons() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "doomed"}))).await;
    let m = marker("pause");
    let mut ex = exec_stream(&relay, ADMIN, &format!("echo go; exec -a {m} sleep 300")).await;
    assert_eq!(ex.next(STEP).await.unwrap().event, "stdout");
    assert_eq!(relay.call("POST", "/api/sandboxes/default/pause", Some(ADMIN), None).await.status, 200);
    let result = last_event(&mut ex).await;
    assert_eq!(result.json()["closed"], json!("paused"), "{result:?}");
    for path in ["exec/stream", "exec", "processes"] {
        let r = relay
            .call("POST", &format!("/api/sandboxes/default/{path}"), Some(ADMIN), Some(json!({"command": "true"})))
            .await;
        assert_eq!(
            (r.status, r.json()["error"]["code"].clone()),
            (503, json!("unavailable")),
            "a paused sandbox runs nothing: {path}: {r:?}"
        );
    }
    assert_eq!(relay.call("POST", "/api/sandboxes/default/resume", Some(ADMIN), None).await.status, 200);
    assert!(!pids_with(&m).is_empty(), "a command cut off by a pause is not killed");

    let p = relay
        .call("POST", "/api/sandboxes/doomed/processes", Some(ADMIN), Some(json!({"command": "sleep 300"})))
        .await
        .json();
    let pid = p["process_id"].as_str().unwrap();
    let mut attach =
        relay.sse("GET", &format!("/api/sandboxes/doomed/processes/{pid}/stream"), Some(ADMIN), None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(relay.call("DELETE", "/api/sandboxes/doomed", Some(ADMIN), None).await.status, 204);
    let close = last_event(&mut attach).await;
    assert_eq!((close.event.as_str(), close.json()["reason"].clone()), ("close", json!("destroyed")), "{close:?}");
    for p in pids_with(&m) {
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
}

#[tokio::test]
async fn shutdown_ends_streams_at_once_and_spares_the_commands() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    let m = marker("shutdown");
    let mut ex = exec_stream(&relay, ADMIN, &format!("echo go; exec -a {m} sleep 300")).await;
    assert_eq!(ex.next(STEP).await.unwrap().event, "stdout");
    let p = relay
        .call("POST", "/api/sandboxes/default/processes", Some(ADMIN), Some(json!({"command": "sleep 300"})))
        .await
        .json();
    let pid = p["process_id"].as_str().unwrap();
    let mut attach =
        relay.sse("GET", &format!("/api/sandboxes/default/processes/{pid}/stream"), Some(ADMIN), None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    relay.stop();
    assert!(t.elapsed() < Duration::from_secs(5), "the relay does not wait for streams: {:?}", t.elapsed());
    let result = last_event(&mut ex).await;
    assert_eq!(result.json()["closed"], json!("shutdown"), "{result:?}");
    let close = last_event(&mut attach).await;
    assert_eq!(close.json()["reason"], json!("shutdown"), "{close:?}");
    let alive = pids_with(&m);
    assert!(!alive.is_empty(), "a streamed command cut off by shutdown runs on");
    for p in alive {
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
}

#[tokio::test]
async fn a_stream_past_its_byte_cap_sends_nothing_more_but_the_result() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_STREAM_MAX_BYTES", "1000")]);
    let mut s = exec_stream(&relay, ADMIN, "for i in $(seq 1 500); do echo line-$i; done").await;
    let all = s.collect(STEP).await;
    let sent: usize =
        all.iter().filter(|e| e.event == "stdout").map(|e| e.json()["data"].as_str().unwrap().len()).sum();
    assert!(sent <= 1000, "{sent} bytes sent");
    let result = all.last().unwrap().json();
    assert_eq!(result["closed"], json!("max_bytes"), "{result}");
    assert!(result["stdout"].as_str().unwrap().ends_with("line-500\n"), "the result has the end of the output");
    assert_eq!(result["exit_code"], json!(0));
}

#[tokio::test]
async fn a_stream_is_paced_to_its_bytes_per_second() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_STREAM_BYTES_PER_SECOND", "4000")]);
    let t = Instant::now();
    // 12,000 bytes at 4,000 a second with a second of burst: at least two seconds.
    let mut s = exec_stream(&relay, ADMIN, "head -c 12000 /dev/zero | tr '\\0' x").await;
    let all = s.collect(Duration::from_secs(30)).await;
    let sent: usize =
        all.iter().filter(|e| e.event == "stdout").map(|e| e.json()["data"].as_str().unwrap().len()).sum();
    assert_eq!(sent, 12000);
    assert!(t.elapsed() >= Duration::from_millis(1900), "not paced: {:?}", t.elapsed());
}

/// A relay whose streams live about a second, and an attach to `command` started on it.
async fn attached_for_a_second(command: &str) -> (StateDir, Relay, Sse) {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_STREAM_MAX_HOURS", "0.0003")]);
    let path = "/api/sandboxes/default/processes";
    let p = relay.call("POST", path, Some(ADMIN), Some(json!({ "command": command }))).await.json();
    let pid = p["process_id"].as_str().unwrap();
    let attach = relay.sse("GET", &format!("{path}/{pid}/stream"), Some(ADMIN), None).await;
    (state, relay, attach)
}

#[tokio::test]
async fn attach_streams_close_at_their_lifetime() {
    let (_state, _relay, mut attach) = attached_for_a_second("sleep 30").await;
    let close = last_event(&mut attach).await;
    assert_eq!((close.event.as_str(), close.json()["reason"].clone()), ("close", json!("lifetime")), "{close:?}");
}

/// The lifetime's timer is made once and kept while the stream sends: a stream busy with output
/// still closes at its lifetime.
#[tokio::test]
async fn busy_attach_streams_close_at_their_lifetime_too() {
    let (_state, _relay, mut attach) = attached_for_a_second("for i in $(seq 300); do echo $i; sleep 0.05; done").await;
    let (mut outputs, mut close) = (0, None);
    while let Some(ev) = attach.next(Duration::from_secs(20)).await {
        match ev.event.as_str() {
            "output" => outputs += 1,
            "close" => {
                close = Some(ev);
                break;
            }
            _ => {}
        }
    }
    let close = close.expect("a close event");
    assert_eq!(close.json()["reason"], json!("lifetime"), "{close:?}");
    assert!(outputs >= 5, "output kept coming until the close: {outputs} events");
}

#[tokio::test]
async fn metrics_count_streams_in_prometheus_text() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    assert_eq!(relay.call("GET", "/metrics", None, None).await.status, 401);
    let mut s = exec_stream(&relay, ADMIN, "echo hello").await;
    last_event(&mut s).await;
    drop(s);
    let _open = exec_stream(&relay, ADMIN, "sleep 30").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = relay.call("GET", "/metrics", Some(ADMIN), None).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = String::from_utf8_lossy(&r.body).into_owned();
    for needle in [
        r#"hangar_streams_open{kind="exec"} 1"#,
        r#"hangar_streams{kind="exec",reason="done"} 1"#,
        r#"hangar_stream_bytes{kind="exec"} 6"#,
        r#"hangar_stream_first_output_seconds_count{kind="exec"} 1"#,
    ] {
        assert!(text.contains(needle), "{needle} in:\n{text}");
    }
}

/// About 200 KB/s of numbered lines (2 KB each, ten every 0.1 s), forever: `printf` is a bash
/// builtin, so the rate does not depend on how fast processes start.
const STEADY: &str = "pad=$(printf '%02000d' 0); i=0; while :; do i=$((i+1)); printf '%08d %s\\n' $i $pad; \
                      if [ $((i % 10)) = 0 ]; then sleep 0.1; fi; done";

/// What a reader heard while it listened.
#[derive(Debug, Default)]
struct Heard {
    /// `output` or `stdout` events.
    output: usize,
    gaps: usize,
    /// The longest time without any event, the end of the listening included.
    silence: Duration,
}

/// Reads `s` for `how_long`, counting what comes and timing the silences between events.
async fn listen(mut s: Sse, how_long: Duration) -> Heard {
    let end = Instant::now() + how_long;
    let (mut heard, mut last) = (Heard::default(), Instant::now());
    loop {
        let left = end.saturating_duration_since(Instant::now());
        // The outer timeout ends the listening; `next`'s own bound is never reached.
        let Ok(ev) = tokio::time::timeout(left, s.next(Duration::from_secs(3600))).await else { break };
        let ev = ev.expect("the stream ended while it was listened to");
        heard.silence = heard.silence.max(last.elapsed());
        last = Instant::now();
        match ev.event.as_str() {
            "output" | "stdout" => heard.output += 1,
            "gap" => heard.gaps += 1,
            other => panic!("unexpected event {other}: {ev:?}"),
        }
    }
    heard.silence = heard.silence.max(last.elapsed());
    heard
}

async fn start_process(relay: &Relay, tok: &str, command: &str) -> String {
    let r = relay.call("POST", "/api/sandboxes/default/processes", Some(tok), Some(json!({"command": command}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["process_id"].as_str().unwrap().to_string()
}

/// The fault injector's finding: clients that open a process's stream and never read used to
/// hold the one HTTP/2 connection between the relay and the sandbox's daemon, so every other
/// stream of the sandbox (another token's readers, a streamed command) fell silent, and a new
/// command waited. Now each stalled client costs only its own bounded buffer; when it reads
/// again it is told what it lost (`gap`) and goes on with live output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_never_slow_other_streams() {
    const STALLED_PER_TOKEN: usize = 16; // HANGAR_STREAM_MAX_PER_TOKEN's default
    const LISTEN: Duration = Duration::from_secs(30);
    const QUIET: Duration = Duration::from_secs(3);
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let mut stalled_tokens = Vec::new();
    for name in ["stalled-1", "stalled-2"] {
        stalled_tokens.push(relay.token(name, "user").await.secret);
    }
    let reader = relay.token("reader", "user").await.secret;
    let other = relay.token("other", "user").await.secret;

    // Every token's stalled clients take its whole stream allowance, on its own process.
    let mut stalled = Vec::new();
    let mut procs = Vec::new();
    for tok in &stalled_tokens {
        let id = start_process(&relay, tok, STEADY).await;
        let path = format!("/api/sandboxes/default/processes/{id}/stream?since=0");
        for _ in 0..STALLED_PER_TOKEN {
            let s = relay.sse_stalled("GET", &path, Some(tok), None, 4096).await;
            assert_eq!(s.status, 200);
            stalled.push(s);
        }
        let r = relay.call("GET", &path, Some(tok), None).await;
        assert_eq!(r.status, 429, "the stalled clients hold all of their token's streams: {r:?}");
        procs.push((tok.clone(), id));
    }

    // Another token reads its own process, and a third streams a command, all on the sandbox
    // the stalled clients use.
    let id = start_process(&relay, &reader, STEADY).await;
    procs.push((reader.clone(), id.clone()));
    let mut listeners = Vec::new();
    for _ in 0..3 {
        let s = relay.sse("GET", &format!("/api/sandboxes/default/processes/{id}/stream"), Some(&reader), None).await;
        assert_eq!(s.status, 200);
        listeners.push(tokio::spawn(listen(s, LISTEN)));
    }
    let ticking = exec_stream(&relay, &other, "while :; do echo tick; sleep 0.05; done").await;
    listeners.push(tokio::spawn(listen(ticking, LISTEN)));
    // New commands keep completing.
    let execs = {
        let (addr_relay, other) = (&relay, other.clone());
        let end = Instant::now() + LISTEN;
        async move {
            let mut slowest = Duration::ZERO;
            while Instant::now() < end {
                let t = Instant::now();
                let r = addr_relay
                    .call("POST", "/api/sandboxes/default/exec", Some(&other), Some(json!({"command": "echo ok"})))
                    .await;
                assert_eq!((r.status, r.json()["stdout"].clone()), (200, json!("ok\n")), "{r:?}");
                slowest = slowest.max(t.elapsed());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            slowest
        }
    };
    let slowest_exec = execs.await;
    let mut heard = Vec::new();
    for l in listeners {
        heard.push(l.await.expect("listener"));
    }
    eprintln!("listeners: {heard:#?}\nthe slowest new command took {slowest_exec:?}");
    for (i, h) in heard.iter().enumerate() {
        assert!(h.output > 0, "listener {i} heard nothing: {h:?}");
        assert!(h.silence < QUIET, "listener {i} fell silent while clients were stalled: {h:?}");
    }
    assert!(slowest_exec < QUIET, "a new command waited {slowest_exec:?} while clients were stalled");

    // A stalled client that reads again gets what was kept for it, then a gap saying exactly
    // which bytes it lost (more, while it catches up), then live output from where it ends:
    // every event starts where the one before it ended.
    for (n, s) in stalled.iter_mut().enumerate() {
        let deadline = hangar_e2e::Deadline::after(Duration::from_secs(60));
        let (mut at, mut gaps, mut after) = (None::<u64>, 0, 0);
        let mut events = Vec::new();
        while gaps == 0 || after < 3 {
            let ev = deadline
                .run(s.next(Duration::from_secs(60)), || {
                    format!("stalled client {n}, the last events: {:?}", &events[events.len().saturating_sub(10)..])
                })
                .await;
            let ev = ev.expect("the stalled client's stream is open");
            let v = ev.json();
            let (start, end) = match ev.event.as_str() {
                "output" => {
                    let end: u64 = ev.id.as_deref().expect("an output's id").parse().expect("an offset");
                    after += 1;
                    (end - v["data"].as_str().expect("data").len() as u64, end)
                }
                "gap" => {
                    let (from, to) = (v["from"].as_u64().expect("from"), v["to"].as_u64().expect("to"));
                    assert!(from < to && v["lost"].as_u64() == Some(to - from), "{v}");
                    assert_eq!(ev.id, Some(to.to_string()), "a gap's id is where the stream resumes: {ev:?}");
                    (gaps, after) = (gaps + 1, 0);
                    (from, to)
                }
                other => panic!("unexpected event {other}: {ev:?}"),
            };
            assert!(at.is_none_or(|a| a == start), "stalled client {n}: {ev:?} does not start at {at:?}");
            at = Some(end);
            events.push((ev.event, start, end));
        }
    }
    for (tok, id) in procs {
        relay.call("DELETE", &format!("/api/sandboxes/default/processes/{id}"), Some(&tok), None).await;
    }
}

/// A streamed command's own client is its primary reader: while it reads, the command waits for
/// it as for a slow terminal, and nothing is lost. A client that stops reading holds its command
/// up for at most `HANGAR_STREAM_STALL_SECONDS` (default 5); then the command runs on, and the
/// client, when it reads again, gets what was kept for it, a `gap` saying how much of which
/// output it lost, the latest output, and the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_command_whose_client_stops_reading_runs_on() {
    const LINES: u64 = 10_000;
    const LINE: u64 = 2010; // "%08d " + 2000 zeros + "\n"
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let done = workdir(&relay).await.join("printed-all");
    // 20 MB: more than all the buffers between the command and a client that does not read.
    let command = format!(
        "pad=$(printf '%02000d' 0); for i in $(seq 1 {LINES}); do printf '%08d %s\\n' $i $pad; done; touch printed-all"
    );
    let path = "/api/sandboxes/default/exec/stream";
    let mut stalled = relay.sse_stalled("POST", path, Some(ADMIN), Some(json!({ "command": command })), 4096).await;
    assert_eq!(stalled.status, 200);
    let other = relay.token("other", "user").await.secret;
    let ticking = exec_stream(&relay, &other, "while :; do echo tick; sleep 0.05; done").await;
    let listener = tokio::spawn(listen(ticking, Duration::from_secs(10)));
    wait_until(Duration::from_secs(45), "the command prints all its output though its client reads nothing", || {
        done.exists()
    })
    .await;
    let heard = listener.await.expect("listener");
    assert!(heard.output > 0 && heard.silence < Duration::from_secs(3), "another token's stream: {heard:?}");

    let events = stalled.collect(Duration::from_secs(30)).await;
    let (mut before, mut after, mut gap) = (0u64, 0u64, None::<Value>);
    for e in &events {
        match e.event.as_str() {
            "stdout" if gap.is_none() => before += e.json()["data"].as_str().unwrap().len() as u64,
            "stdout" => after += e.json()["data"].as_str().unwrap().len() as u64,
            "gap" => {
                assert!(gap.is_none(), "one gap for one stall: {e:?}");
                gap = Some(e.json());
            }
            _ => {}
        }
    }
    let gap = gap.unwrap_or_else(|| panic!("no gap after {before} bytes of stdout"));
    assert_eq!(gap["stream"], json!("stdout"), "{gap}");
    let (from, to) = (gap["from"].as_u64().unwrap(), gap["to"].as_u64().unwrap());
    assert_eq!(
        (from, gap["lost"].as_u64()),
        (before, Some(to - from)),
        "the gap starts where the client's text ends: {gap}"
    );
    assert_eq!(to + after, LINES * LINE, "after the gap comes the rest, to the end");
    let result = events.last().expect("events");
    assert_eq!(result.event, "result", "{result:?}");
    let r = result.json();
    assert_eq!((r["exit_code"].clone(), r["closed"].clone()), (json!(0), Value::Null), "{r}");
    assert!(r["stdout"].as_str().unwrap().ends_with(&format!("{LINES:08} {}\n", "0".repeat(2000))));
}

/// A client that reads, however slowly, loses nothing: past the relay's buffer the command
/// waits for it (here: 1.2 MB read at the pace of 300 KB/s, four times the buffer).
#[tokio::test]
async fn a_streamed_command_waits_for_a_client_that_reads_slowly() {
    let state = StateDir::new();
    let relay = Relay::start(
        &state.0,
        &[("HANGAR_STREAM_BYTES_PER_SECOND", "300000"), ("HANGAR_STREAM_BUFFER_BYTES", "300000")],
    );
    let t = Instant::now();
    let mut s = exec_stream(&relay, ADMIN, "head -c 1200000 /dev/zero | tr '\\0' x").await;
    let all = s.collect(Duration::from_secs(60)).await;
    assert!(all.iter().all(|e| e.event != "gap"), "a reading client loses nothing");
    let sent: usize =
        all.iter().filter(|e| e.event == "stdout").map(|e| e.json()["data"].as_str().unwrap().len()).sum();
    assert_eq!(sent, 1_200_000);
    assert_eq!(all.last().map(|e| e.json()["exit_code"].clone()), Some(json!(0)));
    assert!(t.elapsed() >= Duration::from_secs(2), "paced: {:?}", t.elapsed());
}
