//! The daemon process itself: flags, environment variables, start-up refusals, SIGTERM, fds.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use hangar_e2e::*;

/// Runs the binary with `args` and expects it to refuse to start (exit non-zero, quickly,
/// without a listening line).
fn assert_refuses(args: &[&str]) {
    let mut child = Command::new(envd_bin())
        .args(["--listen", "127.0.0.1", "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hangar-envd");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            let out = child.wait_with_output().expect("output");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(!st.success(), "{args:?} must be refused");
            assert!(!stdout.contains("listening on"), "{args:?}: {stdout}");
            return;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hangar-envd {args:?} kept running: the flag must be refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_flags_are_refused() {
    assert_refuses(&["--ring-bytes", "100"]);
    assert_refuses(&["--ring-bytes", "lots"]);
    assert_refuses(&["--max-message-bytes", "10"]);
    assert_refuses(&["--access-token-file", "/nonexistent/token/file"]);
    assert_refuses(&["--no-such-flag"]);
    assert_refuses(&["--worker-threads", "0"]);
    assert_refuses(&["--worker-threads", "257"]);
    assert_refuses(&["--worker-threads", "many"]);
    assert_refuses(&["--sched-slice-us", "99"]);
    assert_refuses(&["--sched-slice-us", "100001"]);
    assert_refuses(&["--sched-slice-us", "short"]);
}

/// The names of `pid`'s threads other than its main one (`/proc/PID/task/TID/comm`).
fn other_threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/PID/task")
        .flatten()
        .filter(|t| t.file_name() != pid.to_string().as_str())
        .map(|t| std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string())
        .collect()
}

/// By default the daemon serves everything from its main thread: any other thread is one of the
/// blocking pool's (starts, file work). `--worker-threads N` (or its variable) runs N serving
/// threads, and the daemon serves the same way on them.
#[tokio::test]
async fn the_daemon_serves_from_one_thread_unless_told_otherwise() {
    let one = Envd::start(&[]);
    let four = Envd::builder().env("HANGAR_ENVD_WORKER_THREADS", "4").start();
    for envd in [&one, &four] {
        let mut client = envd.process().await;
        let mut s = within(STEP, "Start", client.start(bash("for i in $(seq 3); do echo line $i; done")))
            .await
            .expect("Start")
            .into_inner();
        let c = collect(&mut s, STEP).await;
        assert_eq!(String::from_utf8_lossy(&c.stdout), "line 1\nline 2\nline 3\n");
        assert_eq!(c.end().exit_code, 0);
    }
    let threads = other_threads(one.pid());
    assert!(threads.iter().all(|t| t == "envd-blocking"), "the default daemon's other threads: {threads:?}");
    let threads = other_threads(four.pid());
    let serving = threads.iter().filter(|t| *t == "envd-worker").count();
    assert!(serving >= 4, "--worker-threads 4 runs 4 serving threads: {threads:?}");
}

/// The serving thread asks for a 100 µs scheduling slice, which kernels from 6.12 on honour
/// (older ones report no slice either way); the blocking pool and the commands the daemon starts
/// keep the kernel's default, and `--sched-slice-us 0` leaves the daemon on it too.
#[tokio::test]
async fn the_serving_thread_alone_runs_on_a_short_slice() {
    let envd = Envd::start(&[]);
    let chosen = Envd::builder().env("HANGAR_ENVD_SCHED_SLICE_US", "2000").start();
    let off = Envd::start(&["--sched-slice-us", "0"]);
    // The test's own thread runs on the kernel's default.
    let default = sched_slice_us(0).expect("sched_getattr");
    let honoured = |us: u64| if kernel_has_custom_slices() { us } else { default };
    let mut client = envd.process().await;
    let (pid, _stream) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    assert_eq!(sched_slice_us(envd.pid()), Some(honoured(100)), "the serving thread");
    assert_eq!(sched_slice_us(pid), Some(default), "a command the daemon started");
    let blocking: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", envd.pid()))
        .expect("/proc/PID/task")
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .filter(|&tid| tid != envd.pid())
        .collect();
    assert!(!blocking.is_empty(), "starting a command runs on the blocking pool");
    for tid in blocking {
        assert_eq!(sched_slice_us(tid), Some(default), "blocking-pool thread {tid}");
    }
    assert_eq!(sched_slice_us(chosen.pid()), Some(honoured(2000)), "HANGAR_ENVD_SCHED_SLICE_US=2000");
    assert_eq!(sched_slice_us(off.pid()), Some(default), "--sched-slice-us 0");
}

/// `HANGAR_LOG` takes a default level and `target=level` pairs; one that does not parse is named
/// in a warning, and the daemon logs at `info`. A started process is logged at `info` before the
/// start event is sent, so each log is read once the start event has arrived.
#[tokio::test]
async fn log_filter_from_environment() {
    for (filter, logs_info) in
        [("warn,hangar_envd=error", false), ("error,hangar_envd=info", true), ("hangar_envd=loud", true)]
    {
        let envd = Envd::builder().env("HANGAR_LOG", filter).start();
        let (_pid, _stream) = grpc_start(&mut envd.process().await, start_req("/bin/true", &[])).await;
        let log = envd.log(100_000);
        assert_eq!(log.contains("event=\"process_started\""), logs_info, "HANGAR_LOG={filter}: {log}");
        let reported = log.contains("event=\"log_filter_invalid\"") && log.contains(filter);
        assert_eq!(reported, filter == "hangar_envd=loud", "HANGAR_LOG={filter}: {log}");
    }
}

/// Flags can come from `HANGAR_ENVD_*` variables.
#[tokio::test]
async fn flags_from_environment() {
    let envd = Envd::builder()
        .env("HANGAR_ENVD_RING_BYTES", "65536")
        .env("HANGAR_ENVD_MAX_MESSAGE_BYTES", "2097152")
        .env("HANGAR_ENVD_EXITED_RETENTION_SECONDS", "42")
        .start();
    let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    let l = info.limits.expect("limits");
    assert_eq!((l.ring_bytes, l.max_message_bytes, l.exited_retention_seconds), (65536, 2097152, 42));
}

#[tokio::test]
async fn access_token_flag() {
    let envd = Envd::start(&["--access-token", "flagtoken"]);
    let (status, _) = envd.unary("/process.Process/List", &serde_json::json!({})).await;
    assert_eq!(status, 401);
    let (status, _) =
        envd.unary_h("/process.Process/List", &serde_json::json!({}), &[("x-access-token", "flagtoken")]).await;
    assert_eq!(status, 200);
}

/// SIGTERM stops the daemon, and it kills the processes it started on its way out (the cases with
/// children in new sessions, and a daemon that dies without cleaning up, are in tree_kill.rs).
#[tokio::test]
async fn sigterm_stops_daemon_and_its_processes() {
    let mut envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, s) = grpc_start(&mut client, start_req("/bin/sleep", &["30"])).await;
    drop(s);
    drop(client);
    unsafe {
        libc::kill(envd.pid() as i32, libc::SIGTERM);
    }
    wait_until(Duration::from_secs(10), "daemon exits on SIGTERM", || !envd.alive()).await;
    let survived = is_running(pid);
    // the daemon is gone, so its Drop cannot find a survivor any more: kill it here
    unsafe {
        libc::killpg(pid as i32, libc::SIGKILL);
    }
    assert!(!survived, "the process outlived the daemon");
}

/// Children get stdio only: no descriptor of the daemon (its sockets, its log) leaks into them.
#[tokio::test]
async fn children_inherit_only_stdio() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, start_req("/bin/ls", &["-l", "/proc/self/fd"]), STEP).await;
    let out = c.stdout_str();
    let fds: Vec<u32> = out
        .lines()
        .filter_map(|l| {
            let (left, _) = l.split_once(" -> ")?;
            let name = left.split_whitespace().last()?;
            name.parse().ok()
        })
        .collect();
    // 0, 1, 2, and the directory ls is reading
    assert!(fds.len() <= 4 && fds.iter().take(3).eq([0, 1, 2].iter()), "open fds in the child: {out}");
    for l in out.lines() {
        assert!(!l.contains("socket:"), "a socket leaked into the child: {out}");
    }
}

/// A relay carries every stream of a sandbox on one HTTP/2 connection, so one connection must
/// open more streams at once than hyper's default limit of 200.
#[tokio::test]
async fn one_connection_carries_hundreds_of_streams() {
    let envd = Envd::start(&[]);
    let channel = envd.channel().await;
    let mut open = Vec::new();
    for i in 0..300 {
        let mut client = pb::process_client::ProcessClient::new(channel.clone());
        let mut s = within(STEP, &format!("Start #{i} on one connection"), client.start(bash("sleep 60")))
            .await
            .unwrap_or_else(|e| panic!("Start #{i}: {e}"))
            .into_inner();
        let first = next_event(&mut s, STEP).await.unwrap_or_else(|e| panic!("Start #{i}: {e}"));
        assert!(matches!(first, Some(pb::process_event::Event::Start(_))), "stream #{i} began with {first:?}");
        open.push(s);
    }
    assert_eq!(open.len(), 300);
}
