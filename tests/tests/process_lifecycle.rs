//! Start streams: event order, exit codes, signals, process groups, lifetimes, keepalives.

use std::time::{Duration, Instant};

use hangar_e2e::*;
use pb::process_event::Event;

#[tokio::test]
async fn start_stream_order_and_exit_code() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("echo out; echo err >&2; exit 3");
    req.stdin = Some(false);
    let c = grpc_run(&mut client, req, STEP).await;
    assert!(c.error.is_none(), "stream error: {:?}", c.error);
    c.assert_well_formed();
    assert!(c.pid() > 0, "start pid");
    assert_eq!(c.stdout, b"out\n");
    assert_eq!(c.stderr, b"err\n");
    let end = c.end();
    assert_eq!(end.exit_code, 3, "{end:?}");
    assert!(end.exited, "exited must be true for a normal exit: {end:?}");
    assert_eq!(end.status, "exit status 3");
    assert_eq!(end.error, None);
}

#[tokio::test]
async fn exit_zero_end_event() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, start_req("/bin/true", &[]), STEP).await;
    c.assert_well_formed();
    let end = c.end();
    assert_eq!((end.exit_code, end.exited), (0, true), "{end:?}");
    assert_eq!(end.status, "exit status 0");
}

/// `end` comes only once both pipes are closed: a background child that still holds stdout
/// keeps the stream going after the shell exited, and its output arrives before `end`.
#[tokio::test]
async fn end_waits_for_both_pipes() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("(sleep 0.5; echo late; echo late-err >&2) & echo early");
    req.stdin = Some(false);
    let started = Instant::now();
    let c = grpc_run(&mut client, req, STEP).await;
    c.assert_well_formed();
    assert_eq!(c.stdout_str(), "early\nlate\n");
    assert_eq!(c.stderr_str(), "late-err\n");
    assert!(started.elapsed() >= Duration::from_millis(450), "end came before the background child closed the pipes");
    assert_eq!(c.end().exit_code, 0);
}

/// Data arrives as it is read, before the process ends.
#[tokio::test]
async fn data_streams_before_exit() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    // prints, then waits for stdin: its output must arrive while it is still running
    let (pid, mut s) = grpc_start(&mut client, bash("echo ready; read x; echo got $x")).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "ready on stdout", |c| c.stdout_str().contains("ready\n")).await;
    assert!(c.end.is_none(), "no end yet");
    within(
        STEP,
        "SendInput",
        client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"abc\n") }),
    )
    .await
    .expect("SendInput");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.stdout_str(), "ready\ngot abc\n");
    assert_eq!(c.end().exit_code, 0);
}

#[tokio::test]
async fn sigkill_in_end_event() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect("SendSignal SIGKILL");
    let c = collect(&mut s, STEP).await;
    let end = c.end();
    assert_eq!(end.status, "signal: killed", "{end:?}");
    assert!(!end.exited, "exited is false when a signal ended the process: {end:?}");
    assert_eq!(end.exit_code, -1, "{end:?}");
}

#[tokio::test]
async fn sigterm_in_end_event() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigterm as i32 }),
    )
    .await
    .expect("SendSignal SIGTERM");
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.end().status, "signal: terminated", "{:?}", c.end());
}

/// Every process gets its own process group; SIGKILL reaches the whole group, and nothing of
/// it survives (zombies included: the daemon reaps the orphans).
#[tokio::test]
async fn group_kill_leaves_no_survivors() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, bash("sleep 1000 & sleep 1000")).await;
    let st = proc_stat(pid).expect("process exists");
    assert_eq!(st.pgrp, pid, "the process leads its own group: {st:?}");
    assert_eq!(st.session, pid, "the process leads its own session: {st:?}");
    // bash plus its two sleeps (or bash exec'ing the last one: at least two processes)
    wait_until(STEP, "the group has 2+ processes", || {
        procs_in_pgid(pid).iter().filter(|p| p.comm == "sleep").count() >= 2 || procs_in_pgid(pid).len() >= 3
    })
    .await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect("SendSignal");
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.end().status, "signal: killed");
    wait_until(Duration::from_secs(5), "no process left in the group", || procs_in_pgid(pid).is_empty()).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

/// hangar Signal: any signal to the group, escalated to SIGKILL after the grace.
#[tokio::test]
async fn hangar_signal_escalates_to_sigkill() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut procs = envd.processes().await;
    // ignores SIGTERM (and so does its child, which inherits the disposition)
    let (pid, mut s) = grpc_start(&mut client, bash("trap '' TERM; echo armed; sleep 1000; echo unreachable")).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "armed", |c| c.stdout_str().contains("armed")).await;
    let sent = Instant::now();
    within(
        STEP,
        "hangar Signal",
        procs.signal(ext::SignalRequest { process: by_pid(pid), signal: libc::SIGTERM, escalate_after_ms: Some(400) }),
    )
    .await
    .expect("hangar Signal TERM with escalation");
    collect_into(&mut s, &mut c, STEP).await;
    let waited = sent.elapsed();
    assert_eq!(c.end().status, "signal: killed", "{:?}", c.end());
    assert!(waited >= Duration::from_millis(350), "SIGKILL came before the grace ran out ({waited:?})");
    assert!(!c.stdout_str().contains("unreachable"));
    wait_until(Duration::from_secs(5), "group gone", || procs_in_pgid(pid).is_empty()).await;
}

/// hangar Signal sends any signal number to the group (here SIGUSR1, trapped by the shell).
#[tokio::test]
async fn hangar_signal_any_number() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut procs = envd.processes().await;
    let (pid, mut s) =
        grpc_start(&mut client, bash("trap 'echo usr1; exit 7' USR1; echo armed; while :; do sleep 0.05; done")).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "armed", |c| c.stdout_str().contains("armed")).await;
    within(
        STEP,
        "hangar Signal",
        procs.signal(ext::SignalRequest { process: by_pid(pid), signal: libc::SIGUSR1, escalate_after_ms: None }),
    )
    .await
    .expect("hangar Signal USR1");
    collect_into(&mut s, &mut c, STEP).await;
    assert!(c.stdout_str().contains("usr1"), "{c:?}");
    assert_eq!(c.end().exit_code, 7, "{:?}", c.end());
}

#[tokio::test]
async fn hangar_signal_out_of_range_is_invalid_argument() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut procs = envd.processes().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    for sig in [0, 65, -1] {
        let err = within(
            STEP,
            "hangar Signal",
            procs.signal(ext::SignalRequest { process: by_pid(pid), signal: sig, escalate_after_ms: None }),
        )
        .await
        .expect_err("signal outside 1..=64 must fail");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "signal {sig}: {err:?}");
    }
    assert!(is_running(pid), "the process is untouched");
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("kill");
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.end().status, "signal: killed");
}

/// After the hangar Attach end event, a killed process reports the signal number too.
async fn assert_killed_by_deadline(envd: &Envd, pid: u32, started: Instant) {
    let mut procs = envd.processes().await;
    let mut s = attach(&mut procs, by_pid(pid), None).await.expect("Attach to the deadline-bound process");
    let log = collect_attach(&mut s, Duration::from_secs(10)).await;
    let elapsed = started.elapsed();
    let exit = log.end().exit.clone().unwrap_or_else(|| panic!("end without exit: {:?}", log.summary()));
    assert_eq!(exit.signal, Some(libc::SIGKILL), "killed at the deadline: {exit:?}");
    assert_eq!(exit.status, "signal: killed");
    assert!(
        elapsed >= Duration::from_millis(800) && elapsed < Duration::from_secs(5),
        "killed after {elapsed:?}, want about 1 s"
    );
}

/// `Connect-Timeout-Ms` on a Connect Start bounds the process's life.
#[tokio::test]
async fn connect_timeout_kills_process() {
    let envd = Envd::start(&[]);
    let started = Instant::now();
    let mut s = envd
        .open_stream(
            "/process.Process/Start",
            &serde_json::json!({"process": {"cmd": "/bin/sleep", "args": ["30"]}}),
            &[("connect-timeout-ms", "1000")],
        )
        .await;
    assert_eq!(s.status, 200);
    let first = s.next_within(STEP).await.expect("envelope").expect("start envelope");
    let pid = first.json()["event"]["start"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("first event is not start: {}", first.json())) as u32;
    let out = s.collect(Duration::from_secs(10)).await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "stream lasted {elapsed:?}");
    // Either an end event with the signal, or a deadline_exceeded end of stream.
    let c = out.collected();
    match (&c.end, out.error_code()) {
        (Some(end), _) => assert_eq!(end.status, "signal: killed", "{end:?}"),
        (None, Some(code)) => assert_eq!(code, "deadline_exceeded", "{out:#?}"),
        (None, None) => panic!("stream ended with neither end event nor error: {out:#?}"),
    }
    assert_killed_by_deadline(&envd, pid, started).await;
    wait_until(STEP, "process gone", || !is_running(pid)).await;
}

/// `grpc-timeout` on a gRPC Start bounds the process's life.
#[tokio::test]
async fn grpc_timeout_kills_process() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let started = Instant::now();
    let mut req = tonic::Request::new(start_req("/bin/sleep", &["30"]));
    req.set_timeout(Duration::from_millis(1000));
    let mut s = within(STEP, "Start", client.start(req)).await.expect("Start").into_inner();
    let pid = match next_event(&mut s, STEP).await {
        Ok(Some(Event::Start(st))) => st.pid,
        other => panic!("want start, got {other:?}"),
    };
    let c = collect(&mut s, Duration::from_secs(10)).await;
    match (&c.end, &c.error) {
        (Some(end), _) => assert_eq!(end.status, "signal: killed", "{end:?}"),
        (None, Some((code, _))) => assert_eq!(code, "deadline_exceeded", "{c:?}"),
        (None, None) => panic!("stream ended with neither end event nor error: {c:?}"),
    }
    assert_killed_by_deadline(&envd, pid, started).await;
}

/// A client that goes away does not kill the process.
#[tokio::test]
async fn client_disconnect_does_not_kill() {
    let envd = Envd::start(&[]);
    let pid = {
        let mut client = envd.process().await;
        let (pid, s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
        drop(s);
        drop(client);
        pid
    };
    // There is no event for "still alive": give a disconnect-triggered kill time to happen.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(is_running(pid), "process {pid} died when its client went away");
    let mut procs = envd.processes().await;
    let list = hangar_list(&mut procs).await;
    let p = list.iter().find(|p| p.pid == pid).unwrap_or_else(|| panic!("pid {pid} not listed: {list:?}"));
    assert_eq!(p.state, ext::ProcessState::Running as i32);
}

/// `Keepalive-Ping-Interval: 1` gives keepalive events on a quiet stream (Connect).
#[tokio::test]
async fn keepalive_events_connect() {
    let envd = Envd::start(&[]);
    let out = envd
        .server_stream(
            "/process.Process/Start",
            &serde_json::json!({"process": {"cmd": "/bin/sleep", "args": ["2.5"]}}),
            &[("keepalive-ping-interval", "1")],
            Duration::from_secs(10),
        )
        .await;
    out.assert_clean_end();
    let c = out.collected();
    c.assert_well_formed();
    assert!(c.keepalives >= 1, "no keepalive in 2.5 s at a 1 s interval: {out:#?}");
    // the raw JSON form: {"event": {"keepalive": {}}}
    assert!(out.messages.iter().any(|m| m["event"].get("keepalive").is_some()), "{out:#?}");
}

/// The same header as gRPC metadata.
#[tokio::test]
async fn keepalive_events_grpc() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let req = with_meta(tonic::Request::new(start_req("/bin/sleep", &["2.5"])), "keepalive-ping-interval", "1");
    let mut s = within(STEP, "Start", client.start(req)).await.expect("Start").into_inner();
    let c = collect(&mut s, Duration::from_secs(10)).await;
    c.assert_well_formed();
    assert!(c.keepalives >= 1, "no keepalive: {c:?}");
}
