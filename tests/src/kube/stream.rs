//! The double's WebSocket subresources, framed as the API server frames them (kube-rs's
//! `remote_command.rs` and `portforward.rs` read them): `exec` on `v5.channel.k8s.io` or
//! `v4.channel.k8s.io` (a byte of channel before each message: 0 stdin, 1 stdout, 2 stderr,
//! 3 the status as a `Status` object, 255 a channel's close in v5), run through `docker exec`;
//! and `portforward` on `v4.channel.k8s.io` (per port, a data and an error channel, each opened
//! by a frame carrying the port as two little-endian bytes), proxied to the container's IP.
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::{tungstenite::protocol::Role, tungstenite::Message, WebSocketStream};

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

pub async fn socket(upgraded: hyper::upgrade::Upgraded) -> Ws {
    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await
}

fn exit_status(code: i32, argv: &[String]) -> Status {
    if code == 0 {
        return Status { status: Some("Success".into()), metadata: Default::default(), ..Default::default() };
    }
    Status {
        status: Some("Failure".into()),
        message: Some(format!(
            "command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"
        )),
        reason: Some("NonZeroExitCode".into()),
        details: Some(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ExitCode".into()),
                message: Some(code.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        metadata: Default::default(),
        ..Default::default()
    }
}

/// Runs `argv` in `container` through `docker exec`, framing its output; the status ends it.
/// A client that goes away ends only the `docker exec` client, never the processes it started
/// (as with a real kubelet).
pub async fn exec(ws: Ws, container: String, argv: Vec<String>, stdin: bool, v5: bool) {
    let (mut tx, mut rx) = ws.split();
    let mut cmd = tokio::process::Command::new("docker");
    cmd.arg("exec");
    if stdin {
        cmd.arg("-i");
    }
    cmd.arg(&container).args(&argv);
    cmd.stdin(if stdin { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let Ok(mut child) = cmd.spawn() else {
        let _ = tx.close().await;
        return;
    };
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else { return };
    let mut child_stdin = child.stdin.take();
    let (frames, mut to_client) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let pump = |mut r: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                ch: u8,
                frames: tokio::sync::mpsc::Sender<Vec<u8>>| async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut f = vec![ch];
            f.extend_from_slice(&buf[..n]);
            if frames.send(f).await.is_err() {
                break;
            }
        }
    };
    let out_task = tokio::spawn(pump(Box::new(out), 1, frames.clone()));
    let err_task = tokio::spawn(pump(Box::new(err), 2, frames.clone()));
    drop(frames);
    loop {
        tokio::select! {
            f = to_client.recv() => match f {
                Some(f) => if tx.send(Message::binary(f)).await.is_err() { return },
                None => break,
            },
            m = rx.next() => match m {
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                    if let Some(s) = child_stdin.as_mut() { let _ = s.write_all(&b[1..]).await; }
                }
                Some(Ok(Message::Binary(b))) if v5 && b.as_ref() == [255, 0] => { child_stdin = None; }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                _ => {}
            },
        }
    }
    let _ = (out_task.await, err_task.await);
    let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(-1);
    let mut f = vec![3u8];
    f.extend(serde_json::to_vec(&exit_status(code, &argv)).unwrap_or_default());
    let _ = tx.send(Message::binary(f)).await;
    let _ = tx.close().await;
}

/// Forwards each of `ports` of the pod at `ip` over the socket.
pub async fn portforward(ws: Ws, ip: String, ports: Vec<u16>) {
    let (mut tx, mut rx) = ws.split();
    let mut conns = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let (data, error) = (2 * i as u8, 2 * i as u8 + 1);
        let [lo, hi] = port.to_le_bytes();
        if tx.send(Message::binary(vec![data, lo, hi])).await.is_err()
            || tx.send(Message::binary(vec![error, lo, hi])).await.is_err()
        {
            return;
        }
        match tokio::net::TcpStream::connect((ip.as_str(), *port)).await {
            Ok(s) => conns.push(Some(s)),
            Err(e) => {
                let mut f = vec![error];
                f.extend(format!("error forwarding port {port} to pod: {e}").into_bytes());
                let _ = tx.send(Message::binary(f)).await;
                conns.push(None);
            }
        }
    }
    // One port is what the provider asks for; more are carried by the first's loop only.
    let Some(Some(conn)) = conns.into_iter().next() else {
        let _ = tx.close().await;
        return;
    };
    let (mut r, mut w) = conn.into_split();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        tokio::select! {
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut f = vec![0u8];
                    f.extend_from_slice(&buf[..n]);
                    if tx.send(Message::binary(f)).await.is_err() { return }
                }
            },
            m = rx.next() => match m {
                // The port's data channel (0): to the pod.
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                    let wrote = w.write_all(&b[1..]).await;
                    if wrote.is_err() { break }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                _ => {}
            },
        }
    }
    let _ = w.shutdown().await;
    let _ = tx.close().await;
}
