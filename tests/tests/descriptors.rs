//! The daemon's descriptors stay bounded however many processes exited: an exited process keeps
//! nothing open (no stdin pipe, no PTY master), so a low `ulimit -n` never stops a start.

use std::time::Duration;

use futures::future::join_all;
use hangar_e2e::*;

/// The descriptor limit the daemons here run under: far fewer than the processes they start.
const NOFILE: u64 = 128;

/// Runs `runs` short processes, `batch` at a time, each with an open stdin pipe (E2B's default)
/// or a PTY; every start must succeed and every run end with exit 0. Returns the daemon's open
/// descriptors before and after.
async fn run_many(envd: &Envd, runs: usize, batch: usize, pty: bool) -> (usize, usize) {
    let client = envd.process().await;
    // The first runs warm the daemon up (its runtime's threads, its listener's connections).
    let mut warm = client.clone();
    grpc_run(&mut warm, start_req("/bin/true", &[]), STEP).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = fd_count(envd.pid()).expect("the daemon's fds");
    for b in 0..runs / batch {
        let starts = (b * batch..(b + 1) * batch).map(|i| {
            let mut c = client.clone();
            async move {
                let mut req = start_req("/bin/true", &[]);
                if pty {
                    req.pty = pty_size(24, 80);
                }
                let s = within(STEP, "Start", c.start(req)).await;
                let c = match s {
                    Ok(s) => collect(&mut s.into_inner(), Duration::from_secs(30)).await,
                    Err(st) => panic!("start #{i} failed: {st:?}"),
                };
                (i, c)
            }
        });
        for (i, c) in join_all(starts).await {
            assert!(
                c.error.is_none() && matches!(&c.end, Some(e) if e.exit_code == 0),
                "run #{i} of {runs} did not end with exit 0: {c:?}"
            );
        }
    }
    // The last outputs' pipes close as their readers see end of file: give them a moment.
    let after = eventually(STEP, "the daemon's fds settle near where they started", || {
        let n = fd_count(envd.pid()).ok()?;
        (n <= before + 8).then_some(n)
    })
    .await;
    (before, after)
}

/// 4x `ulimit -n` processes with open stdin pipes: each exited one closed its pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exited_processes_keep_no_descriptor() {
    let mut envd = Envd::builder().nofile(NOFILE).start();
    let runs = 4 * NOFILE as usize;
    let (before, after) = run_many(&envd, runs, 16, false).await;
    eprintln!("daemon fds: {before} before, {after} after {runs} exited processes (RLIMIT_NOFILE {NOFILE})");
    // They are all still kept (listed, attachable) and still hold nothing.
    let mut procs = envd.processes().await;
    let exited = hangar_list(&mut procs).await.iter().filter(|p| p.state == ext::ProcessState::Exited as i32).count();
    assert!(exited > runs, "{exited} exited processes listed, want all {runs} (+1)");
    // And a process still takes input after all that.
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/cat", &[])).await;
    within(
        STEP,
        "SendInput",
        client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"still\n") }),
    )
    .await
    .expect("SendInput");
    client.close_stdin(pb::CloseStdinRequest { process: by_pid(pid) }).await.expect("CloseStdin");
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.stdout_str(), "still\n");
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

/// The same with PTYs: an exited PTY process's master is closed once its output was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exited_pty_processes_keep_no_descriptor() {
    let mut envd = Envd::builder().nofile(NOFILE).start();
    let runs = 2 * NOFILE as usize;
    let (before, after) = run_many(&envd, runs, 16, true).await;
    eprintln!("daemon fds: {before} before, {after} after {runs} exited PTY processes (RLIMIT_NOFILE {NOFILE})");
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

/// Input to a process that has exited is refused as input to a closed stdin (its pipe is gone).
#[tokio::test]
async fn input_after_exit_is_refused() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, start_req("/bin/true", &[]), STEP).await;
    assert_eq!(c.end().exit_code, 0);
    let err = within(
        STEP,
        "SendInput after exit",
        client.send_input(pb::SendInputRequest { process: by_pid(c.pid()), input: stdin_input(b"late") }),
    )
    .await
    .expect_err("input to an exited process");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    let mut req = start_req("/bin/true", &[]);
    req.pty = pty_size(24, 80);
    let c = grpc_run(&mut client, req, STEP).await;
    let err = within(
        STEP,
        "SendInput pty after exit",
        client.send_input(pb::SendInputRequest { process: by_pid(c.pid()), input: pty_input(b"late") }),
    )
    .await
    .expect_err("PTY input to an exited process");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
}
