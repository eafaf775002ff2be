//! PTY processes: output as `pty` data, the size, resizing, input and the PTY-only rules.

use hangar_e2e::*;

async fn send_pty(client: &mut pb::process_client::ProcessClient<tonic::transport::Channel>, pid: u32, bytes: &[u8]) {
    within(
        STEP,
        "SendInput pty",
        client.send_input(pb::SendInputRequest { process: by_pid(pid), input: pty_input(bytes) }),
    )
    .await
    .unwrap_or_else(|st| panic!("SendInput pty {bytes:?}: {st:?}"));
}

#[tokio::test]
async fn pty_output_and_size() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("stty size; tty");
    req.pty = pty_size(30, 100);
    let c = grpc_run(&mut client, req, STEP).await;
    c.assert_well_formed();
    assert!(c.stdout.is_empty() && c.stderr.is_empty(), "PTY output comes as pty data: {c:?}");
    let out = c.pty_str();
    assert!(out.contains("30 100"), "stty size in {out:?}");
    assert!(out.contains("/dev/pts/"), "the process has a terminal: {out:?}");
    assert_eq!(c.end().exit_code, 0);
}

#[tokio::test]
async fn pty_resize() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("read a; stty size; read b; stty size");
    req.pty = pty_size(24, 80);
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let mut c = Collected::default();
    send_pty(&mut client, pid, b"a\n").await;
    read_until(&mut s, &mut c, STEP, "24 80", |c| c.pty_str().contains("24 80")).await;
    within(STEP, "Update", client.update(pb::UpdateRequest { process: by_pid(pid), pty: pty_size(50, 132) }))
        .await
        .expect("Update (resize)");
    send_pty(&mut client, pid, b"b\n").await;
    read_until(&mut s, &mut c, STEP, "50 132", |c| c.pty_str().contains("50 132")).await;
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0, "{c:?}");
}

#[tokio::test]
async fn pty_input_reaches_the_process() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = start_req("/bin/cat", &[]);
    req.pty = pty_size(24, 80);
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let mut c = Collected::default();
    send_pty(&mut client, pid, b"hello\n").await;
    // the terminal echoes the line, then cat prints it again
    read_until(&mut s, &mut c, STEP, "hello twice", |c| c.pty_str().matches("hello").count() >= 2).await;
    // Ctrl-D at the start of a line: end of file for cat
    send_pty(&mut client, pid, b"\x04").await;
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0, "{c:?}");
}

/// Stdin bytes and CloseStdin are refused on a PTY process; Update is refused on a pipe process.
#[tokio::test]
async fn pty_rules_failed_precondition() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = start_req("/bin/cat", &[]);
    req.pty = pty_size(24, 80);
    let (pty_pid, mut pty_s) = grpc_start(&mut client, req).await;

    let err = within(
        STEP,
        "SendInput stdin to PTY",
        client.send_input(pb::SendInputRequest { process: by_pid(pty_pid), input: stdin_input(b"x\n") }),
    )
    .await
    .expect_err("stdin to a PTY process");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    let err = within(STEP, "CloseStdin PTY", client.close_stdin(pb::CloseStdinRequest { process: by_pid(pty_pid) }))
        .await
        .expect_err("CloseStdin on a PTY process");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    let (pipe_pid, mut pipe_s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let err = within(
        STEP,
        "Update non-PTY",
        client.update(pb::UpdateRequest { process: by_pid(pipe_pid), pty: pty_size(10, 10) }),
    )
    .await
    .expect_err("Update on a non-PTY process");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    // The same over Connect, with the HTTP status.
    let (status, body) = envd
        .unary(
            "/process.Process/Update",
            &serde_json::json!({"process": {"pid": pipe_pid}, "pty": {"size": {"cols": 10, "rows": 10}}}),
        )
        .await;
    assert_eq!((status, body["code"].as_str()), (400, Some("failed_precondition")), "{body}");
    let (status, body) = envd
        .unary(
            "/process.Process/SendInput",
            &serde_json::json!({"process": {"pid": pty_pid}, "input": {"stdin": b64(b"x")}}),
        )
        .await;
    assert_eq!((status, body["code"].as_str()), (400, Some("failed_precondition")), "{body}");

    // Both processes are unharmed and still work.
    send_pty(&mut client, pty_pid, b"\x04").await;
    let c = collect(&mut pty_s, STEP).await;
    assert_eq!(c.end().exit_code, 0);
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pipe_pid) }).await.expect("CloseStdin pipe");
    let c = collect(&mut pipe_s, STEP).await;
    assert_eq!(c.end().exit_code, 0);
    envd.assert_healthy_no_leaks(std::time::Duration::from_secs(2)).await;
}

/// A PTY over Connect JSON: `pty` data events as base64.
#[tokio::test]
async fn pty_over_connect_json() {
    let envd = Envd::start(&[]);
    let out = envd
        .server_stream(
            "/process.Process/Start",
            &serde_json::json!({
                "process": {"cmd": "/bin/bash", "args": ["-c", "stty size"]},
                "pty": {"size": {"cols": 77, "rows": 33}}
            }),
            &[],
            STEP,
        )
        .await;
    out.assert_clean_end();
    let mut pty = Vec::new();
    for m in &out.messages {
        if let Some(d) = m["event"].get("data") {
            assert!(d.get("stdout").is_none(), "PTY output must be pty data: {m}");
            if let Some(p) = d.get("pty") {
                pty.extend(unb64(p.as_str().expect("base64 string")));
            }
        }
    }
    let pty = String::from_utf8_lossy(&pty);
    assert!(pty.contains("33 77"), "{pty:?}");
}

/// A PTY without a size is 80x24.
#[tokio::test]
async fn pty_default_size() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("stty size");
    req.pty = Some(pb::Pty { size: None });
    let c = grpc_run(&mut client, req, STEP).await;
    assert!(c.pty_str().contains("24 80"), "{:?}", c.pty_str());
}
