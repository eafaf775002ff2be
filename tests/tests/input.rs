//! Stdin: SendInput, CloseStdin, `stdin: false`, StreamInput over gRPC and over Connect.

use std::time::Duration;

use bytes::Bytes;
use hangar_e2e::*;
use pb::stream_input_request as sir;
use serde_json::json;

fn si_start(pid: u32) -> pb::StreamInputRequest {
    pb::StreamInputRequest { event: Some(sir::Event::Start(sir::StartEvent { process: by_pid(pid) })) }
}

fn si_data(bytes: &[u8]) -> pb::StreamInputRequest {
    pb::StreamInputRequest { event: Some(sir::Event::Data(sir::DataEvent { input: stdin_input(bytes) })) }
}

fn si_keepalive() -> pb::StreamInputRequest {
    pb::StreamInputRequest { event: Some(sir::Event::Keepalive(sir::KeepAlive {})) }
}

#[tokio::test]
async fn send_input_echoes_and_close_stdin_ends_cat() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let mut c = Collected::default();
    for line in ["hello\n", "world\n"] {
        within(
            STEP,
            "SendInput",
            client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(line.as_bytes()) }),
        )
        .await
        .expect("SendInput");
    }
    read_until(&mut s, &mut c, STEP, "both lines", |c| c.stdout_str() == "hello\nworld\n").await;
    within(STEP, "CloseStdin", client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }))
        .await
        .expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    let end = c.end();
    assert_eq!((end.exit_code, end.exited), (0, true), "{end:?}");

    // Input after CloseStdin is refused.
    let (pid2, mut s2) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid2) }).await.expect("CloseStdin");
    let err = within(
        STEP,
        "SendInput after CloseStdin",
        client.send_input(pb::SendInputRequest { process: by_pid(pid2), input: stdin_input(b"x") }),
    )
    .await
    .expect_err("stdin is closed");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid2), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("kill");
    collect(&mut s2, STEP).await;
}

#[tokio::test]
async fn stdin_false_is_dev_null() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;

    let mut req = start_req("/bin/readlink", &["/proc/self/fd/0"]);
    req.stdin = Some(false);
    let c = grpc_run(&mut client, req, STEP).await;
    assert_eq!(c.stdout_str(), "/dev/null\n");

    // cat on /dev/null ends at once with nothing to say
    let mut req = start_req("/bin/cat", &[]);
    req.stdin = Some(false);
    let c = grpc_run(&mut client, req, Duration::from_secs(5)).await;
    c.assert_well_formed();
    assert!(c.stdout.is_empty() && c.stderr.is_empty(), "{c:?}");
    assert_eq!(c.end().exit_code, 0);

    // default (absent) is a pipe
    let c = grpc_run(&mut client, start_req("/bin/readlink", &["/proc/self/fd/0"]), STEP).await;
    assert!(c.stdout_str().starts_with("pipe:"), "absent stdin means a pipe: {c:?}");

    // input to a /dev/null stdin is refused
    let mut req = start_req("/bin/sleep", &["30"]);
    req.stdin = Some(false);
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let err = within(
        STEP,
        "SendInput",
        client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"x") }),
    )
    .await
    .expect_err("stdin is /dev/null");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("kill");
    collect(&mut s, STEP).await;
}

/// gRPC client streaming: each message reaches the process as it is sent.
#[tokio::test]
async fn stream_input_grpc() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;

    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut c2 = client.clone();
    let call = tokio::spawn(async move { c2.stream_input(tokio_stream::wrappers::ReceiverStream::new(rx)).await });
    tx.send(si_start(pid)).await.unwrap();
    tx.send(si_data(b"one\n")).await.unwrap();
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "one (sent while the stream is open)", |c| c.stdout_str() == "one\n").await;
    tx.send(si_keepalive()).await.unwrap();
    tx.send(si_data(b"two\n")).await.unwrap();
    drop(tx);
    within(STEP, "StreamInput response", call).await.expect("task").expect("StreamInput");
    read_until(&mut s, &mut c, STEP, "two", |c| c.stdout_str() == "one\ntwo\n").await;
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
}

/// StreamInput by tag, and to an unknown pid (not_found).
#[tokio::test]
async fn stream_input_by_tag_and_unknown() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = start_req("/bin/cat", &[]);
    req.tag = Some("catter".into());
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let msgs = vec![
        pb::StreamInputRequest { event: Some(sir::Event::Start(sir::StartEvent { process: by_tag("catter") })) },
        si_data(b"tagged\n"),
    ];
    within(STEP, "StreamInput", client.stream_input(tokio_stream::iter(msgs))).await.expect("StreamInput by tag");
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "tagged", |c| c.stdout_str() == "tagged\n").await;

    let msgs = vec![si_start(999_999), si_data(b"x")];
    let err =
        within(STEP, "StreamInput", client.stream_input(tokio_stream::iter(msgs))).await.expect_err("unknown pid");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");

    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
}

fn json_env(v: serde_json::Value) -> Vec<u8> {
    envelope(0, v.to_string().as_bytes())
}

/// Connect client streaming over HTTP/1.1: the envelopes in one request body.
#[tokio::test]
async fn stream_input_connect_whole_body() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let mut body = json_env(json!({"start": {"process": {"pid": pid}}}));
    body.extend(json_env(json!({"data": {"input": {"stdin": b64(b"alpha\n")}}})));
    body.extend(json_env(json!({"keepalive": {}})));
    body.extend(json_env(json!({"data": {"input": {"stdin": b64(b"beta\n")}}})));
    let resp = envd.open_stream_raw("/process.Process/StreamInput", "application/connect+json", body, &[]).await;
    let out = resp.collect(STEP).await;
    out.assert_clean_end();
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "alpha beta", |c| c.stdout_str() == "alpha\nbeta\n").await;
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
}

/// Connect client streaming over HTTP/1.1 with a chunked body sent piece by piece: input reaches
/// the process before the body ends.
#[tokio::test]
async fn stream_input_connect_incremental() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let (tx, resp) = envd.http_chunked(
        "POST",
        "/process.Process/StreamInput",
        &[("content-type", "application/connect+json"), ("connect-protocol-version", "1")],
    );
    tx.send(Bytes::from(json_env(json!({"start": {"process": {"pid": pid}}})))).await.unwrap();
    tx.send(Bytes::from(json_env(json!({"data": {"input": {"stdin": b64(b"first\n")}}})))).await.unwrap();
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "first, while the body is still open", |c| c.stdout_str() == "first\n").await;
    // an envelope split across two chunks
    let e = json_env(json!({"data": {"input": {"stdin": b64(b"second\n")}}}));
    tx.send(Bytes::copy_from_slice(&e[..3])).await.unwrap();
    tx.send(Bytes::copy_from_slice(&e[3..])).await.unwrap();
    drop(tx);
    let resp = within(STEP, "StreamInput response", resp).await.expect("task");
    let out = ConnectStream::new(resp).collect(STEP).await;
    out.assert_clean_end();
    read_until(&mut s, &mut c, STEP, "second", |c| c.stdout_str() == "first\nsecond\n").await;
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
}

/// SendInput and CloseStdin over Connect JSON unary.
#[tokio::test]
async fn send_input_connect_unary() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    let (status, body) = envd
        .unary(
            "/process.Process/SendInput",
            &json!({"process": {"pid": pid}, "input": {"stdin": b64(b"via connect\n")}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({}));
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "echo", |c| c.stdout_str() == "via connect\n").await;
    let (status, body) = envd.unary("/process.Process/CloseStdin", &json!({"process": {"pid": pid}})).await;
    assert_eq!(status, 200, "{body}");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().exit_code, 0);
}
