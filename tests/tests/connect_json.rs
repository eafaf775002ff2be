//! The Connect protocol itself: canonical JSON, binary proto, chunked bodies, h2c.

use std::time::Duration;

use bytes::{Buf, Bytes};
use hangar_e2e::*;
use prost::Message as _;
use serde_json::json;

/// Splits a whole Connect streaming body into envelopes.
fn split_envelopes(mut body: Bytes) -> Vec<Envelope> {
    let mut out = Vec::new();
    while !body.is_empty() {
        assert!(body.len() >= 5, "truncated envelope header: {body:?}");
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        body.advance(5);
        assert!(body.len() >= len, "truncated envelope: want {len}, have {}", body.len());
        out.push(Envelope { flags, data: body.split_to(len) });
    }
    out
}

/// What the e2b SDK's `commands.run` sends (less `-l`: a login shell's profile is the machine's
/// business), over Connect JSON: canonical JSON both ways.
#[tokio::test]
async fn start_stream_canonical_json() {
    let envd = Envd::start(&[]);
    let s = envd
        .open_stream(
            "/process.Process/Start",
            &json!({
                "process": {"cmd": "/bin/bash", "args": ["-c", "echo hi; echo oops >&2; exit 3"], "envs": {}},
                "stdin": false
            }),
            &[("connect-timeout-ms", "60000"), ("keepalive-ping-interval", "50")],
        )
        .await;
    assert_eq!(s.status, 200);
    let ct = s.headers.get("content-type").map(|v| v.to_str().unwrap().to_string());
    assert_eq!(ct.as_deref(), Some("application/connect+json"));
    let out = s.collect(STEP).await;
    out.assert_clean_end();
    assert_eq!(out.end, Some(json!({})), "a clean end-of-stream is {{}}");
    let first = &out.messages[0];
    assert!(first["event"]["start"]["pid"].is_u64(), "pid is a JSON number: {first}");
    let last = out.messages.last().unwrap();
    let end = &last["event"]["end"];
    assert_eq!(end["exitCode"], json!(3), "camelCase exitCode as a number: {last}");
    assert_eq!(end["exited"], json!(true), "{last}");
    assert_eq!(end["status"], json!("exit status 3"), "{last}");
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    for m in &out.messages[1..out.messages.len() - 1] {
        let d = &m["event"]["data"];
        if let Some(b) = d.get("stdout") {
            stdout.extend(unb64(b.as_str().expect("base64 string")));
        } else if let Some(b) = d.get("stderr") {
            stderr.extend(unb64(b.as_str().expect("base64 string")));
        } else if m["event"].get("keepalive").is_none() {
            panic!("unexpected message {m}");
        }
    }
    assert_eq!(stdout, b"hi\n");
    assert_eq!(stderr, b"oops\n");
}

#[tokio::test]
async fn unary_list_json() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = start_req("/bin/sleep", &["30"]);
    req.tag = Some("sleeper".into());
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let (status, body) = envd.unary("/process.Process/List", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let procs = body["processes"].as_array().unwrap_or_else(|| panic!("{body}"));
    let p = procs
        .iter()
        .find(|p| p["pid"] == json!(pid))
        .unwrap_or_else(|| panic!("pid {pid} (as a JSON number) not in {body}"));
    assert_eq!(p["tag"], json!("sleeper"));
    assert_eq!(p["config"]["cmd"], json!("/bin/sleep"));
    assert_eq!(p["config"]["args"], json!(["30"]));
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .unwrap();
    collect(&mut s, STEP).await;
}

/// Unknown JSON fields are ignored; an empty body for an empty message is accepted.
#[tokio::test]
async fn unknown_fields_ignored() {
    let envd = Envd::start(&[]);
    let out = envd
        .server_stream(
            "/process.Process/Start",
            &json!({
                "process": {"cmd": "/bin/echo", "args": ["ok"], "futureField": 1},
                "someNewOption": {"nested": true}
            }),
            &[],
            STEP,
        )
        .await;
    out.assert_clean_end();
    assert_eq!(out.collected().stdout_str(), "ok\n");
    let r = envd
        .http("POST", "/process.Process/List", &[("content-type", "application/json")], "{\"whatever\": [1,2,3]}")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// Enums by name, 64-bit integers as strings, timestamps as RFC 3339 (hangar List, Connect JSON).
#[tokio::test]
async fn hangar_list_json_forms() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, bash("printf abcde; exit 4"), STEP).await;
    let pid = c.pid();
    let (status, body) = envd.unary("/hangar.envd.v1.Processes/List", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let p = body["processes"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["pid"] == json!(pid)))
        .unwrap_or_else(|| panic!("pid {pid} not in {body}"))
        .clone();
    assert_eq!(p["outputBytes"], json!("5"), "uint64 as a string: {p}");
    assert_eq!(p["state"], json!("PROCESS_STATE_EXITED"), "enum by name: {p}");
    assert_eq!(p["exit"]["exitCode"], json!(4), "{p}");
    let ended = p["exit"]["endedAt"].as_str().unwrap_or_else(|| panic!("endedAt string: {p}"));
    assert!(ended.contains('T') && ended.ends_with('Z'), "RFC 3339: {ended}");
    let started = p["startedAt"].as_str().unwrap_or_else(|| panic!("startedAt: {p}"));
    assert!(started <= ended, "{started} <= {ended}");
}

/// Daemon/Info over Connect JSON and gRPC.
#[tokio::test]
async fn daemon_info() {
    let envd = Envd::start(&["--ring-bytes", "131072", "--max-message-bytes", "1048576"]);
    let mut d = envd.daemon().await;
    let info = d.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    assert!(!info.version.is_empty());
    let v: Vec<u32> = info
        .envd_version
        .split('.')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("envd_version {:?}", info.envd_version)))
        .collect();
    assert!(v.len() == 3 && (v[0], v[1], v[2]) >= (0, 6, 4), "{:?}", info.envd_version);
    let limits = info.limits.expect("limits");
    assert_eq!(limits.ring_bytes, 131072);
    assert_eq!(limits.max_message_bytes, 1048576);
    assert_eq!(limits.exited_retention_seconds, 600);
    assert!(!info.capabilities.is_empty());
    let (status, body) = envd.unary("/hangar.envd.v1.Daemon/Info", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["envdVersion"], json!(info.envd_version));
    assert_eq!(body["limits"]["ringBytes"], json!("131072"));
}

/// Connect binary: `application/proto` unary and `application/connect+proto` streaming.
#[tokio::test]
async fn connect_binary_list_and_start() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;

    let r = envd
        .http(
            "POST",
            "/process.Process/List",
            &[("content-type", "application/proto"), ("connect-protocol-version", "1")],
            pb::ListRequest {}.encode_to_vec(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type").as_deref(), Some("application/proto"));
    let list = pb::ListResponse::decode(r.body.clone()).expect("ListResponse in proto");
    assert!(list.processes.iter().any(|p| p.pid == pid), "{list:?}");

    let mut req = bash("echo binary; exit 2");
    req.stdin = Some(false);
    let mut st = envd
        .open_stream_raw("/process.Process/Start", "application/connect+proto", envelope(0, &req.encode_to_vec()), &[])
        .await;
    assert_eq!(st.status, 200);
    let mut c = Collected::default();
    let mut end_env = None;
    while let Some(e) = st.next_within(STEP).await.expect("envelope") {
        if e.is_end() {
            end_env = Some(e.json());
        } else {
            let m = pb::StartResponse::decode(e.data.clone()).expect("StartResponse in proto");
            if let Some(ev) = m.event.and_then(|e| e.event) {
                c.push(ev);
            }
        }
    }
    assert_eq!(end_env, Some(json!({})), "the end-of-stream message is JSON, no error");
    c.assert_well_formed();
    assert_eq!(c.stdout_str(), "binary\n");
    assert_eq!(c.end().exit_code, 2);

    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .unwrap();
    collect(&mut s, STEP).await;
}

/// Connect over HTTP/2 cleartext with prior knowledge: unary and streaming.
#[tokio::test]
async fn connect_over_h2c() {
    let envd = Envd::start(&[]);
    let r = envd
        .h2(
            "POST",
            "/process.Process/List",
            &[("content-type", "application/json"), ("connect-protocol-version", "1")],
            "{}",
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json().is_object(), "{r:?}");

    let body = envelope(
        0,
        json!({"process": {"cmd": "/bin/echo", "args": ["over h2c"]}, "stdin": false}).to_string().as_bytes(),
    );
    let r = envd
        .h2(
            "POST",
            "/process.Process/Start",
            &[("content-type", "application/connect+json"), ("connect-protocol-version", "1")],
            body,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let envs = split_envelopes(r.body.clone());
    let (last, msgs) = envs.split_last().expect("envelopes");
    assert!(last.is_end(), "last envelope is end-of-stream");
    assert_eq!(last.json(), json!({}));
    let out = StreamOutcome {
        status: 200,
        messages: msgs.iter().map(|e| e.json()).collect(),
        end: Some(last.json()),
        ..Default::default()
    };
    let c = out.collected();
    c.assert_well_formed();
    assert_eq!(c.stdout_str(), "over h2c\n");
}

/// An HTTP/1.1 unary request whose body arrives chunked, in pieces.
#[tokio::test]
async fn chunked_unary_body() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    let (tx, resp) = envd.http_chunked(
        "POST",
        "/process.Process/SendSignal",
        &[("content-type", "application/json"), ("connect-protocol-version", "1")],
    );
    let body = json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}).to_string();
    let (a, b) = body.split_at(body.len() / 2);
    tx.send(Bytes::from(a.to_string())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(Bytes::from(b.to_string())).await.unwrap();
    drop(tx);
    let resp = within(STEP, "chunked response", resp).await.expect("task");
    let r = read_raw(resp).await;
    assert_eq!(r.status, 200, "{r:?}");
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.end().status, "signal: killed");
}

/// An unknown procedure is answered, not hung: 404 (Connect) with a JSON error or unimplemented.
#[tokio::test]
async fn unknown_procedure() {
    let envd = Envd::start(&[]);
    let (status, body) = envd.unary("/process.Process/NoSuchMethod", &json!({})).await;
    assert!(status == 404 || (status == 501 && body["code"] == json!("unimplemented")), "status {status}: {body}");
}

/// Protocol misuse: unsupported content type (415), GET on an RPC (405), a server-streaming
/// method called as unary (invalid_argument), a malformed `Keepalive-Ping-Interval` or
/// `Connect-Timeout-Ms` (invalid_argument).
#[tokio::test]
async fn protocol_misuse() {
    let mut envd = Envd::start(&[]);
    let r = envd.http("POST", "/process.Process/List", &[("content-type", "text/plain")], "{}").await;
    assert_eq!(r.status, 415, "{r:?}");
    let r = envd.http("GET", "/process.Process/List", &[], "").await;
    assert_eq!(r.status, 405, "{r:?}");
    let (status, body) =
        envd.unary("/process.Process/Start", &json!({"process": {"cmd": "/bin/echo", "args": ["unary"]}})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_argument")), "{body}");
    for (h, v) in [("keepalive-ping-interval", "soon"), ("connect-timeout-ms", "-5")] {
        let out = envd
            .server_stream(
                "/process.Process/Start",
                &json!({"process": {"cmd": "/bin/echo", "args": ["x"]}}),
                &[(h, v)],
                STEP,
            )
            .await;
        assert_eq!(out.error_code().as_deref(), Some("invalid_argument"), "{h}: {v}: {out:#?}");
        assert!(out.messages.is_empty(), "{out:#?}");
    }
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}
