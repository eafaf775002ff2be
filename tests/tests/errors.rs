//! Bad input: unknown selectors, malformed JSON and envelopes, oversize messages. After each the
//! daemon still answers and has leaked nothing.

use std::time::Duration;

use hangar_e2e::*;
use serde_json::json;

const UNKNOWN_PID: u32 = 999_999;

#[tokio::test]
async fn unknown_pid_or_tag_not_found_grpc() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut procs = envd.processes().await;
    // a tagged process exists, so "no match" cannot be "no processes at all"
    let mut req = start_req("/bin/sleep", &["30"]);
    req.tag = Some("present".into());
    let (pid, mut s) = grpc_start(&mut client, req).await;

    for sel in [by_pid(UNKNOWN_PID), by_tag("absent")] {
        let what = format!("{sel:?}");
        let err = client
            .send_signal(pb::SendSignalRequest { process: sel.clone(), signal: pb::Signal::Sigkill as i32 })
            .await
            .expect_err("SendSignal");
        assert_eq!(err.code(), tonic::Code::NotFound, "SendSignal {what}: {err:?}");
        let err = client
            .send_input(pb::SendInputRequest { process: sel.clone(), input: stdin_input(b"x") })
            .await
            .expect_err("SendInput");
        assert_eq!(err.code(), tonic::Code::NotFound, "SendInput {what}: {err:?}");
        let err = client.close_stdin(pb::CloseStdinRequest { process: sel.clone() }).await.expect_err("CloseStdin");
        assert_eq!(err.code(), tonic::Code::NotFound, "CloseStdin {what}: {err:?}");
        let err =
            client.update(pb::UpdateRequest { process: sel.clone(), pty: pty_size(10, 10) }).await.expect_err("Update");
        assert_eq!(err.code(), tonic::Code::NotFound, "Update {what}: {err:?}");
        // Connect: the error comes with the call or as the stream's status
        let code = match client.connect(pb::ConnectRequest { process: sel.clone() }).await {
            Err(st) => st.code(),
            Ok(r) => {
                let c = collect(&mut r.into_inner(), STEP).await;
                assert!(c.events.is_empty(), "Connect {what}: events {c:?}");
                match c.error {
                    Some((code, _)) => {
                        assert_eq!(code, "not_found", "Connect {what}");
                        tonic::Code::NotFound
                    }
                    None => panic!("Connect {what} ended without error"),
                }
            }
        };
        assert_eq!(code, tonic::Code::NotFound, "Connect {what}");
        let err = match attach(&mut procs, sel.clone(), None).await {
            Err(st) => st,
            Ok(mut s) => collect_attach(&mut s, STEP).await.error.unwrap_or_else(|| panic!("Attach {what} succeeded")),
        };
        assert_eq!(err.code(), tonic::Code::NotFound, "Attach {what}: {err:?}");
        let err = procs
            .signal(ext::SignalRequest { process: sel.clone(), signal: libc::SIGKILL, escalate_after_ms: None })
            .await
            .expect_err("hangar Signal");
        assert_eq!(err.code(), tonic::Code::NotFound, "hangar Signal {what}: {err:?}");
    }
    assert!(is_running(pid), "the tagged process was not touched");
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("kill");
    collect(&mut s, STEP).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn unknown_pid_or_tag_not_found_connect() {
    let mut envd = Envd::start(&[]);
    for sel in [json!({"pid": UNKNOWN_PID}), json!({"tag": "absent"})] {
        let (status, body) =
            envd.unary("/process.Process/SendSignal", &json!({"process": sel, "signal": "SIGNAL_SIGKILL"})).await;
        assert_eq!(status, 404, "SendSignal {sel}: {body}");
        assert_eq!(body["code"], "not_found", "{body}");
        assert!(body["message"].is_string(), "error message: {body}");
        let (status, body) =
            envd.unary("/process.Process/SendInput", &json!({"process": sel, "input": {"stdin": b64(b"x")}})).await;
        assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
        let out = envd.server_stream("/process.Process/Connect", &json!({"process": sel}), &[], STEP).await;
        assert_eq!(out.error_code().as_deref(), Some("not_found"), "Connect {sel}: {out:#?}");
        assert!(out.messages.is_empty(), "{out:#?}");
        let out = envd.server_stream("/hangar.envd.v1.Processes/Attach", &json!({"process": sel}), &[], STEP).await;
        assert_eq!(out.error_code().as_deref(), Some("not_found"), "Attach {sel}: {out:#?}");
    }
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn malformed_json_is_invalid_argument() {
    let mut envd = Envd::start(&[]);
    let ct = [("content-type", "application/json"), ("connect-protocol-version", "1")];
    for body in ["{not json", "[1, 2]", "\"str\"", "{\"process\": {\"pid\": \"abc\"}}"] {
        let r = envd.http("POST", "/process.Process/SendSignal", &ct, body).await;
        assert_eq!(r.status, 400, "body {body:?}: {r:?}");
        assert_eq!(r.code().as_deref(), Some("invalid_argument"), "body {body:?}: {r:?}");
    }
    // malformed JSON inside a well-formed envelope
    let resp = envd
        .open_stream_raw("/process.Process/Start", "application/connect+json", envelope(0, b"{\"process\": "), &[])
        .await;
    let out = resp.collect(STEP).await;
    assert_eq!(out.error_code().as_deref(), Some("invalid_argument"), "{out:#?}");
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn malformed_envelope_is_invalid_argument() {
    let mut envd = Envd::start(&[]);
    let start = json!({"process": {"cmd": "/bin/sleep", "args": ["30"]}}).to_string();
    // length prefix larger than the body
    let mut too_long = vec![0u8, 0, 0, 0, 200];
    too_long.extend_from_slice(start.as_bytes());
    // garbage, not an envelope at all
    let garbage = b"garbage garbage garbage".to_vec();
    // a short header
    let short = vec![0u8, 0];
    // flag bits no Connect envelope defines (0x40, 0x80), compressed bit clear
    let unknown_flags = envelope(0x40, start.as_bytes());
    let cases = [("too long", too_long), ("garbage", garbage), ("short", short), ("unknown flags", unknown_flags)];
    for (name, body) in cases {
        let resp = envd.open_stream_raw("/process.Process/Start", "application/connect+json", body, &[]).await;
        let out = resp.collect(STEP).await;
        assert_eq!(out.error_code().as_deref(), Some("invalid_argument"), "{name}: {out:#?}");
        assert!(out.messages.is_empty(), "{name}: no process may start from a malformed envelope: {out:#?}");
    }
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn oversize_message_is_resource_exhausted() {
    let mut envd = Envd::start(&["--max-message-bytes", "65536"]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let big = vec![b'x'; 100 * 1024];

    // Connect unary
    let (status, body) = envd
        .unary("/process.Process/SendInput", &json!({"process": {"pid": pid}, "input": {"stdin": b64(&big)}}))
        .await;
    assert_eq!((status, body["code"].as_str()), (429, Some("resource_exhausted")), "{body}");

    // gRPC unary
    let err = within(
        STEP,
        "SendInput big",
        client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(&big) }),
    )
    .await
    .expect_err("100 KiB over a 64 KiB limit");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");

    // Connect client stream: one oversize envelope
    let mut body = envelope(0, json!({"start": {"process": {"pid": pid}}}).to_string().as_bytes());
    body.extend(envelope(0, json!({"data": {"input": {"stdin": b64(&big)}}}).to_string().as_bytes()));
    let out = envd
        .open_stream_raw("/process.Process/StreamInput", "application/connect+json", body, &[])
        .await
        .collect(STEP)
        .await;
    assert_eq!(out.error_code().as_deref(), Some("resource_exhausted"), "{out:#?}");

    // nothing of it reached the process, which still works
    let mut client = envd.process().await;
    client
        .send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"small\n") })
        .await
        .expect("small input");
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "small", |c| c.stdout_str().contains("small\n")).await;
    assert_eq!(c.stdout_str(), "small\n", "no byte of the refused inputs");
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn missing_cwd_is_invalid_argument() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = start_req("/bin/pwd", &[]);
    req.process.as_mut().unwrap().cwd = Some("/nonexistent/dir/for/hangar".into());
    let code = match client.start(req).await {
        Err(st) => st.code(),
        Ok(r) => {
            let c = collect(&mut r.into_inner(), STEP).await;
            assert!(c.events.is_empty(), "no events for a refused start: {c:?}");
            match c.error {
                Some((code, _)) => {
                    assert_eq!(code, "invalid_argument");
                    tonic::Code::InvalidArgument
                }
                None => panic!("Start with a missing cwd succeeded: {c:?}"),
            }
        }
    };
    assert_eq!(code, tonic::Code::InvalidArgument);
    let out = envd
        .server_stream(
            "/process.Process/Start",
            &json!({"process": {"cmd": "/bin/pwd", "cwd": "/nonexistent/dir/for/hangar"}}),
            &[],
            STEP,
        )
        .await;
    assert_eq!(out.error_code().as_deref(), Some("invalid_argument"), "{out:#?}");
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}

/// A command that does not exist: the Start fails or ends with an error, and nothing leaks.
#[tokio::test]
async fn missing_command_fails_cleanly() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    match client.start(start_req("/nonexistent/binary", &[])).await {
        Err(st) => assert_ne!(st.code(), tonic::Code::Ok),
        Ok(r) => {
            let c = collect(&mut r.into_inner(), STEP).await;
            assert!(
                c.error.is_some() || c.end.as_ref().is_some_and(|e| e.exit_code != 0 || e.error.is_some()),
                "a missing command must fail: {c:?}"
            );
        }
    }
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}

/// A command named without a slash is looked up in the request's `PATH`, in order, as `execvp`
/// does: a file there that is not executable is passed over for a later one, and is the error
/// (`EACCES`, invalid argument) when no later one runs; a name on no `PATH` entry is not found.
/// The same whether the process is created in its cgroup (`clone3`) or forked without one.
#[tokio::test]
async fn commands_are_looked_up_in_the_requests_path() {
    use std::os::unix::fs::PermissionsExt as _;
    let dirs = hangar_e2e::files::Scratch::new("path-lookup");
    let (first, second) = (dirs.join("first"), dirs.join("second"));
    for (dir, mode) in [(&first, 0o644), (&second, 0o755)] {
        std::fs::create_dir_all(dir).expect("mkdir");
        let tool = dir.join("hangar-tool");
        std::fs::write(&tool, format!("#!/bin/sh\necho from {}\n", dir.display())).expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let path = |dirs: &[&std::path::Path]| {
        let mut v: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        v.push("/usr/bin:/bin".into());
        v.join(":")
    };
    for &mode in start_modes() {
        let mut envd = Envd::builder().env("HANGAR_ENVD_CGROUPS", mode).start();
        let mut client = envd.process().await;
        let start = |p: String| {
            let mut req = start_req("hangar-tool", &[]);
            req.process.as_mut().expect("process").envs.insert("PATH".into(), p);
            req
        };
        // The executable one, after the one that is not.
        let c = grpc_run(&mut client, start(path(&[&first, &second])), STEP).await;
        assert_eq!(c.stdout_str().trim(), format!("from {}", second.display()), "{mode}: {c:?}");
        // Only the one that is not executable.
        let err = client.start(start(path(&[&first]))).await.expect_err("a file that is not executable");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{mode}: {err:?}");
        assert!(err.message().contains("Permission denied"), "{mode}: {err:?}");
        // Nowhere on PATH.
        let err = client.start(start("/usr/bin:/bin".into())).await.expect_err("a command on no PATH entry");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{mode}: {err:?}");
        assert!(err.message().contains("No such file or directory"), "{mode}: {err:?}");
        envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
    }
}
