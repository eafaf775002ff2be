//! Listing: hangar List keeps exited processes; E2B List and Connect.

use std::time::Duration;

use hangar_e2e::*;
use pb::process_event::Event;

#[tokio::test]
async fn hangar_list_keeps_exited() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, bash("printf hello; exit 3"), STEP).await;
    let exited_pid = c.pid();
    let mut req = start_req("/bin/sleep", &["30"]);
    req.tag = Some("runner".into());
    let (running_pid, mut s) = grpc_start(&mut client, req).await;

    let mut procs = envd.processes().await;
    let list = hangar_list(&mut procs).await;
    let e = list
        .iter()
        .find(|p| p.pid == exited_pid)
        .unwrap_or_else(|| panic!("exited pid {exited_pid} not listed: {list:#?}"));
    assert_eq!(e.state, ext::ProcessState::Exited as i32, "{e:?}");
    let exit = e.exit.as_ref().unwrap_or_else(|| panic!("no exit: {e:?}"));
    assert_eq!(exit.exit_code, 3);
    assert_eq!(exit.status, "exit status 3");
    assert_eq!(exit.signal, None);
    assert!(exit.ended_at.is_some(), "ended_at: {e:?}");
    assert!(e.started_at.is_some(), "started_at: {e:?}");
    let (st, en) = (e.started_at.unwrap(), exit.ended_at.unwrap());
    assert!((st.seconds, st.nanos) <= (en.seconds, en.nanos), "started before ended: {e:?}");
    assert_eq!(e.output_bytes, 5);
    assert_eq!(e.oldest_offset, 0);
    assert!(!e.pty);
    assert_eq!(e.config.as_ref().map(|c| c.cmd.as_str()), Some("/bin/bash"));
    assert!(!e.user.is_empty());

    let r = list.iter().find(|p| p.pid == running_pid).unwrap_or_else(|| panic!("running pid not listed: {list:#?}"));
    assert_eq!(r.state, ext::ProcessState::Running as i32);
    assert!(r.exit.is_none());
    assert_eq!(r.tag.as_deref(), Some("runner"));

    let running =
        procs.list(ext::ListRequest { running_only: true }).await.expect("List running_only").into_inner().processes;
    assert!(running.iter().any(|p| p.pid == running_pid));
    assert!(!running.iter().any(|p| p.pid == exited_pid), "running_only excludes exited: {running:?}");

    // E2B List: running processes with their config and tag
    let e2b = client.list(pb::ListRequest {}).await.expect("E2B List").into_inner();
    let p = e2b
        .processes
        .iter()
        .find(|p| p.pid == running_pid)
        .unwrap_or_else(|| panic!("running pid not in E2B List: {e2b:?}"));
    assert_eq!(p.tag.as_deref(), Some("runner"));
    let cfg = p.config.as_ref().expect("config");
    assert_eq!((cfg.cmd.as_str(), cfg.args.clone()), ("/bin/sleep", vec!["30".to_string()]));

    client
        .send_signal(pb::SendSignalRequest { process: by_pid(running_pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .unwrap();
    collect(&mut s, STEP).await;
    let list = hangar_list(&mut procs).await;
    let k = list.iter().find(|p| p.pid == running_pid).expect("killed one still listed");
    assert_eq!(k.state, ext::ProcessState::Exited as i32);
    assert_eq!(k.exit.as_ref().and_then(|e| e.signal), Some(libc::SIGKILL));
    assert_eq!(k.exit.as_ref().map(|e| e.exit_code), Some(-1));
    assert_eq!(k.exit.as_ref().map(|e| e.status.as_str()), Some("signal: killed"));
}

/// E2B Connect to an exited process: start, then end (no replay).
#[tokio::test]
async fn e2b_connect_to_exited() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, bash("echo gone; exit 5"), STEP).await;
    let pid = c.pid();
    let mut s = client
        .connect(pb::ConnectRequest { process: by_pid(pid) })
        .await
        .expect("Connect to an exited process")
        .into_inner();
    let cc = collect(&mut s, STEP).await;
    assert!(cc.error.is_none(), "{cc:?}");
    assert_eq!(cc.events.len(), 2, "start then end: {cc:?}");
    assert!(matches!(&cc.events[0], Event::Start(s) if s.pid == pid), "{cc:?}");
    let end = cc.end();
    assert_eq!((end.exit_code, end.exited, end.status.as_str()), (5, true, "exit status 5"));

    // the same over Connect JSON
    let out =
        envd.server_stream("/process.Process/Connect", &serde_json::json!({"process": {"pid": pid}}), &[], STEP).await;
    out.assert_clean_end();
    let cj = out.collected();
    assert_eq!(cj.events.len(), 2, "{out:#?}");
    assert_eq!(cj.end().exit_code, 5);
}

/// E2B Connect to a running process: live output only (no replay of what came before), then
/// the end.
#[tokio::test]
async fn e2b_connect_live() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, bash("echo before; read x; echo after-$x")).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "before", |c| c.stdout_str() == "before\n").await;
    let mut conn = client.connect(pb::ConnectRequest { process: by_pid(pid) }).await.expect("Connect").into_inner();
    match next_event(&mut conn, STEP).await {
        Ok(Some(Event::Start(st))) => assert_eq!(st.pid, pid),
        other => panic!("want start, got {other:?}"),
    }
    client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"live\n") }).await.unwrap();
    let mut cc = Collected::default();
    collect_into(&mut conn, &mut cc, STEP).await;
    assert_eq!(cc.stdout_str(), "after-live\n", "Connect shows live output only");
    assert_eq!(cc.end().exit_code, 0);
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.stdout_str(), "before\nafter-live\n");
}

/// `Connect-Timeout-Ms` on an E2B Connect bounds the stream, not the process: only Start's
/// deadline kills.
#[tokio::test]
async fn connect_deadline_does_not_kill() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    let t = std::time::Instant::now();
    let out = envd
        .server_stream(
            "/process.Process/Connect",
            &serde_json::json!({"process": {"pid": pid}}),
            &[("connect-timeout-ms", "500")],
            STEP,
        )
        .await;
    assert!(t.elapsed() < Duration::from_secs(5), "the Connect stream outlived its deadline: {out:#?}");
    assert!(out.collected().end.is_none(), "no end event: the process is still running: {out:#?}");
    assert_eq!(out.error_code().as_deref(), Some("deadline_exceeded"), "{out:#?}");
    assert!(is_running(pid), "Connect's deadline killed the process");
    // gRPC the same
    let mut req = tonic::Request::new(pb::ConnectRequest { process: by_pid(pid) });
    req.set_timeout(Duration::from_millis(500));
    if let Ok(r) = client.connect(req).await {
        let c = collect(&mut r.into_inner(), STEP).await;
        assert!(c.end.is_none(), "{c:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(is_running(pid), "Connect's grpc-timeout killed the process");
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .unwrap();
    collect(&mut s, STEP).await;
}

/// `--exited-retention-seconds`: an exited process is forgotten after the window.
#[tokio::test]
async fn exited_retention_window() {
    let envd = Envd::start(&["--exited-retention-seconds", "1"]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, start_req("/bin/true", &[]), STEP).await;
    let pid = c.pid();
    let mut procs = envd.processes().await;
    assert!(hangar_list(&mut procs).await.iter().any(|p| p.pid == pid), "listed right after exit");
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    loop {
        if !hangar_list(&mut procs).await.iter().any(|p| p.pid == pid) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still listed 6 s after a 1 s retention");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let code = match client.connect(pb::ConnectRequest { process: by_pid(pid) }).await {
        Err(st) => st.code(),
        Ok(r) => {
            let c = collect(&mut r.into_inner(), STEP).await;
            match &c.error {
                Some((code, _)) if code == "not_found" => tonic::Code::NotFound,
                other => panic!("Connect after retention: want not_found, got {other:?} {c:?}"),
            }
        }
    };
    assert_eq!(code, tonic::Code::NotFound);
}

/// A signal to an exited process (its group is empty) is not_found; the tag of an exited process
/// still selects it for Connect within retention.
#[tokio::test]
async fn signal_to_exited_and_exited_tag() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let mut req = bash("exit 9");
    req.tag = Some("done".into());
    let c = grpc_run(&mut client, req, STEP).await;
    let err = client
        .send_signal(pb::SendSignalRequest { process: by_pid(c.pid()), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect_err("signal to an exited process");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let mut s =
        client.connect(pb::ConnectRequest { process: by_tag("done") }).await.expect("Connect by tag").into_inner();
    let cc = collect(&mut s, STEP).await;
    assert_eq!(cc.pid(), c.pid());
    assert_eq!(cc.end().exit_code, 9);
}
