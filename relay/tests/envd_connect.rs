//! The relay's Connect transport (`envd::connect`) against the real hangar-envd:
//! tonic's generated clients, as the relay holds them, with every call carried as Connect over
//! HTTP/1.1 (the daemon runs `--e2b-only`, which serves HTTP/1.1 alone, as E2B's envd does).
use std::time::Duration;

use hangar_e2e::{files::Scratch, *};
use hangar_proto::{
    filesystem::{watch_dir_response, WatchDirRequest},
    process::{process_event, SendInputRequest, SendSignalRequest, Signal, StreamInputRequest},
};
use hangar_relay::envd::{DaemonKind, Envd as Client, Wire};
use tonic::Code;

const TOKEN: &str = "connect-transport-token";

fn daemon(args: &[&str]) -> Envd {
    Envd::builder().args(args).env("HANGAR_ENVD_ACCESS_TOKEN", TOKEN).start()
}

/// The relay's client of `d`, every call over Connect (as for a sandbox behind E2B's edge).
fn client(d: &Envd) -> Client {
    Client::over_http1(&d.url(), TOKEN, &[]).expect("a client")
}

fn listed(pids: &[u32], pid: u32) -> bool {
    pids.contains(&pid)
}

async fn pids(c: &Client) -> Vec<u32> {
    let list = within(STEP, "List", c.process().list(pb::ListRequest {})).await.expect("List answers");
    list.into_inner().processes.iter().map(|p| p.pid).collect()
}

/// Output arrives as it is written (the first line while the process waits on its input), List
/// and SendInput go through, and the stream ends with the process's end and a clean status.
#[tokio::test]
async fn start_streams_live_and_list_and_input_go_through() {
    let d = daemon(&["--e2b-only"]);
    let c = client(&d);
    assert!(matches!(c.wire(), Wire::Connect(_)));
    let req = bash("echo first; read line; echo \"got $line\"");
    let mut s = within(STEP, "Start", c.process().start(req)).await.expect("Start answers").into_inner();
    let mut col = Collected::default();
    read_until(&mut s, &mut col, STEP, "the first line", |c| c.stdout_str() == "first\n").await;
    assert!(col.end.is_none(), "the process waits on its input, so it has not ended: {col:#?}");
    let pid = col.pid();
    assert!(listed(&pids(&c).await, pid), "List has the running process {pid}");

    let input = SendInputRequest { process: by_pid(pid), input: stdin_input(b"hello\n") };
    within(STEP, "SendInput", c.process().send_input(input)).await.expect("SendInput answers");
    collect_into(&mut s, &mut col, STEP).await;
    assert_eq!((col.stdout_str().as_str(), col.end().exit_code, &col.error), ("first\ngot hello\n", 0, &None));
    col.assert_well_formed();
}

/// SendSignal kills; Connect's errors come back as the gRPC codes they name (the daemon's
/// `not_found`, `unauthenticated`, `unimplemented`), a calling pattern HTTP/1.1 cannot carry is
/// refused at once, and a daemon that is not there is `unavailable`.
#[tokio::test]
async fn signals_go_through_and_errors_keep_their_codes() {
    let d = daemon(&["--e2b-only"]);
    let c = client(&d);
    let (pid, mut s) = {
        let mut s = within(STEP, "Start", c.process().start(start_req("/bin/sleep", &["300"])))
            .await
            .expect("Start answers")
            .into_inner();
        match next_event(&mut s, STEP).await {
            Ok(Some(process_event::Event::Start(st))) => (st.pid, s),
            other => panic!("the first event is the start, got {other:?}"),
        }
    };
    let kill = SendSignalRequest { process: by_pid(pid), signal: Signal::Sigkill as i32 };
    within(STEP, "SendSignal", c.process().send_signal(kill)).await.expect("SendSignal answers");
    let col = collect(&mut s, STEP).await;
    assert!(col.end.as_ref().is_some_and(|e| !e.exited), "ended by the signal: {col:#?}");
    assert!(!is_running(pid));

    let gone = SendSignalRequest { process: by_pid(pid), signal: Signal::Sigkill as i32 };
    let gone = within(STEP, "SendSignal", c.process().send_signal(gone)).await.expect_err("no such process");
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");

    let hangars = within(STEP, "hangar's List", c.processes().list(ext::ListRequest { running_only: false })).await;
    assert_eq!(hangars.expect_err("not served by --e2b-only").code(), Code::Unimplemented);

    let input = futures::stream::iter(Vec::<StreamInputRequest>::new());
    let streamed = within(STEP, "StreamInput", c.process().stream_input(input)).await.expect_err("refused");
    assert_eq!(streamed.code(), Code::Unimplemented, "{streamed:?}");
    assert!(streamed.message().contains("HTTP/1.1"), "{streamed:?}");

    let wrong = Client::over_http1(&d.url(), "not-the-token", &[]).expect("a client");
    let denied = within(STEP, "List", wrong.process().list(pb::ListRequest {})).await.expect_err("a wrong token");
    assert_eq!(denied.code(), Code::Unauthenticated, "{denied:?}");

    let addr = d.addr();
    drop(d);
    let nobody = Client::over_http1(&format!("http://{addr}"), TOKEN, &[]).expect("a client");
    let unreachable = within(STEP, "List", nobody.process().list(pb::ListRequest {})).await.expect_err("nobody");
    assert_eq!(unreachable.code(), Code::Unavailable, "{unreachable:?}");
}

/// E2B's WatchDir streams a change as it happens.
#[tokio::test]
async fn watch_dir_streams_changes() {
    let d = daemon(&["--e2b-only"]);
    let c = client(&d);
    let dir = Scratch::new("connect-watch");
    let req = WatchDirRequest { path: dir.str(), recursive: false, include_entry: false, allow_network_mounts: false };
    let mut s = within(STEP, "WatchDir", c.filesystem().watch_dir(req)).await.expect("WatchDir answers").into_inner();
    let first = within(STEP, "the start event", s.message()).await.expect("a message").expect("not ended");
    assert!(matches!(first.event, Some(watch_dir_response::Event::Start(_))), "{first:?}");
    std::fs::write(dir.join("made"), b"x").expect("write a file");
    loop {
        let m = within(STEP, "the change", s.message()).await.expect("a message").expect("not ended");
        if let Some(watch_dir_response::Event::Filesystem(e)) = m.event {
            assert_eq!(e.name, "made", "{e:?}");
            break;
        }
    }
}

/// The call's deadline reaches the daemon as `Connect-Timeout-Ms`: a Start outliving it is
/// killed and its stream ends, at the end event or with `deadline_exceeded`.
#[tokio::test]
async fn a_deadline_ends_the_call() {
    let d = daemon(&["--e2b-only"]);
    let c = client(&d);
    let mut req = tonic::Request::new(start_req("/bin/sleep", &["300"]));
    req.set_timeout(Duration::from_secs(2));
    let mut s = within(STEP, "Start", c.process().start(req)).await.expect("Start answers").into_inner();
    let col = collect(&mut s, STEP).await;
    match (&col.end, &col.error) {
        (Some(end), _) => assert!(!end.exited, "killed at the deadline: {col:#?}"),
        (None, Some((code, _))) => assert_eq!(code, "deadline_exceeded", "{col:#?}"),
        (None, None) => panic!("the stream ended with neither an end nor an error: {col:#?}"),
    }
    assert!(!is_running(col.pid()), "killed at the deadline");
}

/// Dropping a Start stream closes its connection, so the daemon sees its client go: a process
/// that writes more than the daemon holds for an unread stream (its ring) waits on that stream
/// while it is open, and runs to its end once the client has gone.
#[tokio::test]
async fn dropping_a_start_stream_lets_the_daemon_see_its_client_go() {
    let d = daemon(&["--e2b-only"]);
    let c = client(&d);
    let req = start_req("/usr/bin/head", &["-c", "67108864", "/dev/zero"]);
    let mut s = within(STEP, "Start", c.process().start(req)).await.expect("Start answers").into_inner();
    let pid = match next_event(&mut s, STEP).await {
        Ok(Some(process_event::Event::Start(st))) => st.pid,
        other => panic!("the first event is the start, got {other:?}"),
    };
    assert!(listed(&pids(&c).await, pid), "64 MiB unread hold the process");
    drop(s);
    let deadline = std::time::Instant::now() + STEP;
    while listed(&pids(&c).await, pid) {
        assert!(std::time::Instant::now() < deadline, "the process ran free and ended once its stream's client went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How `alive` tells the daemons apart over Connect, and which transport each then gets:
/// hangar-envd keeps gRPC, E2B's envd (here `--e2b-only`) Connect, and a client made for E2B's
/// edge Connect whichever it finds.
#[tokio::test]
async fn alive_tells_the_daemons_apart_and_picks_the_transport() {
    let full = daemon(&[]);
    let e2b = daemon(&["--e2b-only"]);
    let of_full = Client::new(&full.url(), TOKEN).expect("a client");
    assert_eq!(of_full.alive(STEP).await.expect("alive"), DaemonKind::Hangar);
    assert!(matches!(of_full.wire(), Wire::Grpc(_)));
    assert_eq!(of_full.alive(STEP).await.expect("alive again"), DaemonKind::Hangar);

    let of_e2b = Client::new(&e2b.url(), TOKEN).expect("a client");
    assert_eq!(of_e2b.alive(STEP).await.expect("alive"), DaemonKind::E2b);
    assert!(matches!(of_e2b.wire(), Wire::Connect(_)));
    assert_eq!(of_e2b.alive(STEP).await.expect("alive again"), DaemonKind::E2b);
    pids(&of_e2b).await;

    let edge = client(&full);
    assert_eq!(edge.alive(STEP).await.expect("alive"), DaemonKind::Hangar);
    assert!(matches!(edge.wire(), Wire::Connect(_)));
    let info = edge.processes().list(ext::ListRequest { running_only: false }).await;
    assert!(info.is_ok(), "hangar's services over Connect: {info:?}");
}
