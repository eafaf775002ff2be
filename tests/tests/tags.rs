//! Tags: exact selection, not_found, already_exists, reuse after exit.

use hangar_e2e::*;
use pb::process_event::Event;

async fn start_tagged(
    client: &mut pb::process_client::ProcessClient<tonic::transport::Channel>,
    tag: &str,
) -> (u32, tonic::Streaming<pb::StartResponse>) {
    let mut req = start_req("/bin/cat", &[]);
    req.tag = Some(tag.to_string());
    grpc_start(client, req).await
}

#[tokio::test]
async fn tags_select_exactly() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid_a, mut sa) = start_tagged(&mut client, "a").await;
    let (pid_b, mut sb) = start_tagged(&mut client, "b").await;
    assert_ne!(pid_a, pid_b);

    // Connect by tag "b" reaches b
    let mut conn_b = within(STEP, "Connect b", client.connect(pb::ConnectRequest { process: by_tag("b") }))
        .await
        .expect("Connect by tag b")
        .into_inner();
    match next_event(&mut conn_b, STEP).await {
        Ok(Some(Event::Start(s))) => assert_eq!(s.pid, pid_b, "Connect by tag b"),
        other => panic!("Connect: want start, got {other:?}"),
    }

    // input by tag goes to exactly that process
    client
        .send_input(pb::SendInputRequest { process: by_tag("b"), input: stdin_input(b"to-b\n") })
        .await
        .expect("SendInput by tag b");
    client
        .send_input(pb::SendInputRequest { process: by_tag("a"), input: stdin_input(b"to-a\n") })
        .await
        .expect("SendInput by tag a");
    let mut ca = Collected::default();
    read_until(&mut sa, &mut ca, STEP, "a's line", |c| c.stdout.len() >= 5).await;
    assert_eq!(ca.stdout_str(), "to-a\n", "a got only its own input");
    let mut cb = Collected::default();
    read_until(&mut sb, &mut cb, STEP, "b's line", |c| c.stdout.len() >= 5).await;
    assert_eq!(cb.stdout_str(), "to-b\n");
    let mut cconn = Collected::default();
    read_until(&mut conn_b, &mut cconn, STEP, "b's line on Connect", |c| c.stdout.len() >= 5).await;
    assert_eq!(cconn.stdout_str(), "to-b\n");

    // a second Start with a running tag
    let mut req = start_req("/bin/echo", &["dup"]);
    req.tag = Some("a".into());
    let code = match client.start(req).await {
        Err(st) => st.code(),
        Ok(r) => {
            let c = collect(&mut r.into_inner(), STEP).await;
            assert!(c.events.is_empty(), "a duplicate tag started a process: {c:?}");
            match c.error {
                Some((code, _)) if code == "already_exists" => tonic::Code::AlreadyExists,
                other => panic!("want already_exists, got {other:?}"),
            }
        }
    };
    assert_eq!(code, tonic::Code::AlreadyExists);

    // unknown tag
    let err = client
        .send_signal(pb::SendSignalRequest { process: by_tag("c"), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect_err("unknown tag");
    assert_eq!(err.code(), tonic::Code::NotFound);

    // SendSignal by tag b kills exactly b
    client
        .send_signal(pb::SendSignalRequest { process: by_tag("b"), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("SendSignal by tag b");
    collect_into(&mut conn_b, &mut cconn, STEP).await;
    assert_eq!(cconn.end().status, "signal: killed", "Connect stream of b");
    collect_into(&mut sb, &mut cb, STEP).await;
    assert_eq!(cb.end().status, "signal: killed");
    assert!(is_running(pid_a), "a survived the kill of b");

    // the tag of an exited process can be used again, and then means the new process
    let (pid_b2, mut sb2) = start_tagged(&mut client, "b").await;
    assert_ne!(pid_b2, pid_b);
    client
        .send_signal(pb::SendSignalRequest { process: by_tag("b"), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("SendSignal by tag b (second)");
    let c = collect(&mut sb2, STEP).await;
    assert_eq!(c.end().status, "signal: killed");
    assert!(is_running(pid_a));

    client.close_stdin(pb::CloseStdinRequest { process: by_tag("a") }).await.expect("CloseStdin by tag a");
    collect_into(&mut sa, &mut ca, STEP).await;
    assert_eq!(ca.end().exit_code, 0);

    // hangar List shows the tags
    let mut procs = envd.processes().await;
    let list = hangar_list(&mut procs).await;
    let tag_of = |pid: u32| list.iter().find(|p| p.pid == pid).and_then(|p| p.tag.clone());
    assert_eq!(tag_of(pid_a).as_deref(), Some("a"));
    assert_eq!(tag_of(pid_b2).as_deref(), Some("b"));
    envd.assert_healthy_no_leaks(std::time::Duration::from_secs(2)).await;
}

/// Starts racing for one tag: exactly one gets it and runs; every other is already_exists. The
/// daemon forks outside its table's lock (starts queue on the reaper's), so it is the tag's
/// reservation that keeps two of them from both starting.
#[tokio::test]
async fn racing_starts_for_one_tag_start_one_process() {
    let mut envd = Envd::start(&[]);
    let channel = envd.channel().await;
    let attempts = (0..16).map(|_| {
        let mut client = pb::process_client::ProcessClient::new(channel.clone());
        async move {
            let mut req = start_req("/bin/cat", &[]);
            req.tag = Some("racing".into());
            let mut s = client.start(req).await.map_err(|st| st.code())?.into_inner();
            match next_event(&mut s, STEP).await {
                Ok(Some(Event::Start(st))) => Ok((st.pid, s)),
                Err(st) => Err(st.code()),
                other => panic!("want start or an error, got {other:?}"),
            }
        }
    });
    let results = futures::future::join_all(attempts).await;
    let started: Vec<u32> = results.iter().filter_map(|r| r.as_ref().ok().map(|(pid, _)| *pid)).collect();
    assert_eq!(started.len(), 1, "exactly one start gets the tag: {results:?}");
    for r in &results {
        if let Err(code) = r {
            assert_eq!(*code, tonic::Code::AlreadyExists, "{results:?}");
        }
    }
    assert!(is_running(started[0]));
    let mut procs = envd.processes().await;
    let tagged = hangar_list(&mut procs).await.into_iter().filter(|p| p.tag.as_deref() == Some("racing")).count();
    assert_eq!(tagged, 1, "one process has the tag");

    let mut client = envd.process().await;
    client
        .send_signal(pb::SendSignalRequest { process: by_tag("racing"), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("SendSignal by tag");
    for (_, mut s) in results.into_iter().flatten() {
        assert_eq!(collect(&mut s, STEP).await.end().status, "signal: killed");
    }
    envd.assert_healthy_no_leaks(std::time::Duration::from_secs(2)).await;
}

/// hangar Attach and Signal by tag.
#[tokio::test]
async fn hangar_attach_and_signal_by_tag() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("echo tagged-output; sleep 30");
    req.tag = Some("job".into());
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "output", |c| c.stdout_str().contains("tagged-output")).await;
    let mut procs = envd.processes().await;
    let mut a = attach(&mut procs, by_tag("job"), None).await.expect("Attach by tag");
    procs
        .signal(ext::SignalRequest { process: by_tag("job"), signal: libc::SIGKILL, escalate_after_ms: None })
        .await
        .expect("Signal by tag");
    let log = collect_attach(&mut a, STEP).await;
    assert_eq!(log.start().pid, pid);
    assert_eq!(log.start().tag.as_deref(), Some("job"));
    assert_eq!(log.data, b"tagged-output\n");
    assert_eq!(log.end().exit.as_ref().and_then(|e| e.signal), Some(libc::SIGKILL));
    collect_into(&mut s, &mut c, STEP).await;
}
