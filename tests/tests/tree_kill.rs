//! Killing a process kills everything it started, children in new sessions included: E2B's
//! `SendSignal` SIGKILL, hangar's `Signal` (SIGKILL, and the escalation), the Start deadline, PTY
//! processes, what is left after the process itself exited, the daemon's own shutdown, and a
//! daemon that died (the next one kills what it left).
//!
//! Every case runs twice: with a cgroup per process (`HANGAR_ENVD_CGROUPS=require`, which needs
//! root and a writable cgroup v2) and with the fallback the daemon uses where it cannot make
//! cgroups (`off`: environment marks found in /proc). The variable, not a flag, selects the mode,
//! so these tests run unchanged against a daemon that predates it and show what it leaves behind.
//! A cgroup per process is made two ways: the child created in it (`clone3`), and, where that is
//! refused, the child moving into it after fork (`join`, which some cases also run).

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use std::os::unix::process::CommandExt as _;

use hangar_e2e::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cgroups,
    /// Cgroups, each child moving into its own after fork (`--cgroups join`).
    Joined,
    Marks,
}

/// A daemon in `mode`, or `None` when this machine cannot run it (skipped; a failure under CI).
fn daemon(mode: Mode) -> Option<Envd> {
    if mode != Mode::Marks && skip_without(cgroups_usable(), "root and a writable cgroup v2 with cgroup.kill") {
        return None;
    }
    let value = match mode {
        Mode::Cgroups => "require",
        Mode::Joined => "join",
        Mode::Marks => "off",
    };
    Some(Envd::builder().env("HANGAR_ENVD_CGROUPS", value).start())
}

static MARKS: AtomicUsize = AtomicUsize::new(0);

/// A `sleep` duration no other process uses, so a command line containing it is this test's.
fn mark() -> String {
    let n = MARKS.fetch_add(1, Ordering::SeqCst);
    format!("{}.{}{:03}", 900 + n, std::process::id(), n)
}

/// A script that starts `sleep MARK` in a new session (its own session and process group, out of
/// reach of a signal to the process group), says `ready`, then runs on.
fn forks_a_new_session(mark: &str, redirect: bool) -> String {
    let io = if redirect { " </dev/null >/dev/null 2>&1" } else { "" };
    format!("setsid sleep {mark}{io} & echo ready; sleep 300")
}

/// Waits for the `sleep MARK` in its new session and checks it left `leader`'s session.
async fn wait_for_new_session(mark: &str, leader: u32) -> ProcStat {
    // Not the leader itself: its command line (the script) holds the mark too, and bash may exec
    // its last command (`sleep 300`) between the two reads, so it can look like the sleep.
    let st = eventually(STEP, "the new-session sleep is running", || {
        pids_with(mark)
            .into_iter()
            .filter(|p| *p != leader)
            .filter_map(proc_stat)
            .find(|p| p.comm == "sleep" && p.state != 'Z')
    })
    .await;
    assert_ne!(st.session, leader, "the grandchild must be in a session of its own: {st:?}");
    assert_ne!(st.pgrp, leader, "the grandchild must be in a group of its own: {st:?}");
    st
}

/// Fails unless, within 5 s, nothing whose command line holds `mark` is left (zombies have no
/// command line: a killed but unreaped process does not count).
async fn assert_no_survivor(mark: &str, what: &str) {
    let left = || pids_with(mark).into_iter().filter_map(proc_stat).filter(|p| p.state != 'Z').collect::<Vec<_>>();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let l = left();
        if l.is_empty() {
            return;
        }
        if std::time::Instant::now() >= deadline {
            // Kill them here, or they outlive the test run.
            for p in &l {
                unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
            }
            panic!("{what}: survivors {l:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `script` and waits for its `ready` and its new-session grandchild.
async fn start_forking(
    envd: &Envd,
    mark: &str,
    redirect: bool,
    pty: bool,
) -> (u32, tonic::Streaming<pb::StartResponse>, Collected) {
    let mut client = envd.process().await;
    let mut req = bash(&forks_a_new_session(mark, redirect));
    if pty {
        req.pty = pty_size(24, 80);
    }
    let (pid, mut s) = grpc_start(&mut client, req).await;
    let mut c = Collected::default();
    read_until(&mut s, &mut c, STEP, "ready", |c| c.stdout_str().contains("ready") || c.pty_str().contains("ready"))
        .await;
    wait_for_new_session(mark, pid).await;
    (pid, s, c)
}

async fn e2b_sigkill(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let (pid, mut s, mut c) = start_forking(&envd, &m, true, false).await;
    let mut client = envd.process().await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect("SendSignal SIGKILL");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().status, "signal: killed", "{c:?}");
    assert_no_survivor(&m, &format!("{mode:?}: E2B SendSignal SIGKILL")).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn e2b_sigkill_reaches_new_sessions_cgroups() {
    e2b_sigkill(Mode::Cgroups).await;
}

#[tokio::test]
async fn e2b_sigkill_reaches_new_sessions_cgroups_joined_after_fork() {
    e2b_sigkill(Mode::Joined).await;
}

#[tokio::test]
async fn e2b_sigkill_reaches_new_sessions_marks() {
    e2b_sigkill(Mode::Marks).await;
}

async fn hangar_signal(mode: Mode, escalate: bool) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let (pid, mut s, mut c) = start_forking(&envd, &m, true, false).await;
    let mut procs = envd.processes().await;
    let req = if escalate {
        // SIGTERM ends the shell and its group; the escalation's SIGKILL must find the rest.
        ext::SignalRequest { process: by_pid(pid), signal: libc::SIGTERM, escalate_after_ms: Some(300) }
    } else {
        ext::SignalRequest { process: by_pid(pid), signal: libc::SIGKILL, escalate_after_ms: None }
    };
    within(STEP, "hangar Signal", procs.signal(req)).await.expect("hangar Signal");
    collect_into(&mut s, &mut c, STEP).await;
    assert!(c.end().status.starts_with("signal: "), "{c:?}");
    assert_no_survivor(&m, &format!("{mode:?}: hangar Signal (escalating: {escalate})")).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn hangar_sigkill_reaches_new_sessions_cgroups() {
    hangar_signal(Mode::Cgroups, false).await;
}

#[tokio::test]
async fn hangar_sigkill_reaches_new_sessions_marks() {
    hangar_signal(Mode::Marks, false).await;
}

#[tokio::test]
async fn escalation_reaches_new_sessions_cgroups() {
    hangar_signal(Mode::Cgroups, true).await;
}

#[tokio::test]
async fn escalation_reaches_new_sessions_marks() {
    hangar_signal(Mode::Marks, true).await;
}

async fn deadline(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let mut client = envd.process().await;
    let mut req = tonic::Request::new(bash(&forks_a_new_session(&m, true)));
    req.set_timeout(Duration::from_millis(1500));
    let mut s = within(STEP, "Start", client.start(req)).await.expect("Start").into_inner();
    let pid = match next_event(&mut s, STEP).await {
        Ok(Some(pb::process_event::Event::Start(st))) => st.pid,
        other => panic!("want start, got {other:?}"),
    };
    wait_for_new_session(&m, pid).await;
    // The deadline kills; the stream then ends with the end event or the deadline's error.
    let c = collect(&mut s, Duration::from_secs(10)).await;
    assert!(c.end.is_some() || c.error.is_some(), "{c:?}");
    assert_no_survivor(&m, &format!("{mode:?}: the Start deadline")).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn deadline_reaches_new_sessions_cgroups() {
    deadline(Mode::Cgroups).await;
}

#[tokio::test]
async fn deadline_reaches_new_sessions_marks() {
    deadline(Mode::Marks).await;
}

/// A PTY process whose new-session child keeps the terminal open: killing the process kills the
/// child, so the terminal closes and the stream ends.
async fn pty(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let (pid, mut s, mut c) = start_forking(&envd, &m, false, true).await;
    let mut client = envd.process().await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect("SendSignal SIGKILL");
    collect_into(&mut s, &mut c, STEP).await;
    assert_eq!(c.end().status, "signal: killed", "{c:?}");
    assert_no_survivor(&m, &format!("{mode:?}: a PTY process")).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn pty_kill_reaches_new_sessions_cgroups() {
    pty(Mode::Cgroups).await;
}

#[tokio::test]
async fn pty_kill_reaches_new_sessions_marks() {
    pty(Mode::Marks).await;
}

/// The process itself exited and left a child in a new session: SIGKILL to the process still
/// reaches what it left; then, with nothing left, a signal is `not_found`.
async fn after_exit(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, bash(&format!("setsid sleep {m} </dev/null >/dev/null 2>&1 & exit 0")), STEP).await;
    assert_eq!(c.end().exit_code, 0, "{c:?}");
    wait_for_new_session(&m, c.pid()).await;
    let mut procs = envd.processes().await;
    within(
        STEP,
        "hangar Signal",
        procs.signal(ext::SignalRequest { process: by_pid(c.pid()), signal: libc::SIGKILL, escalate_after_ms: None }),
    )
    .await
    .expect("SIGKILL to an exited process that left a child");
    assert_no_survivor(&m, &format!("{mode:?}: SIGKILL after the process exited")).await;
    let err = within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(c.pid()), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect_err("nothing left to signal");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");

    // SIGTERM with an escalation (the relay's kill): the group is empty, but the escalation
    // still comes for what the process left.
    let m = mark();
    let c = grpc_run(&mut client, bash(&format!("setsid sleep {m} </dev/null >/dev/null 2>&1 & exit 0")), STEP).await;
    wait_for_new_session(&m, c.pid()).await;
    within(
        STEP,
        "hangar Signal",
        procs.signal(ext::SignalRequest {
            process: by_pid(c.pid()),
            signal: libc::SIGTERM,
            escalate_after_ms: Some(100),
        }),
    )
    .await
    .expect("SIGTERM with escalation to an exited process that left a child");
    assert_no_survivor(&m, &format!("{mode:?}: escalation after the process exited")).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn kill_after_exit_reaches_what_is_left_cgroups() {
    after_exit(Mode::Cgroups).await;
}

#[tokio::test]
async fn kill_after_exit_reaches_what_is_left_marks() {
    after_exit(Mode::Marks).await;
}

/// SIGTERM to the daemon: it kills every process it started, new sessions included, then exits.
async fn shutdown(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let m = mark();
    let (pid, s, _) = start_forking(&envd, &m, true, false).await;
    drop(s);
    // With cgroups: the daemon's parent cgroup, which it removes on its way out.
    let parent_dir = match mode {
        Mode::Cgroups | Mode::Joined => {
            let cg = cgroup_of(pid).expect("the process's cgroup");
            let dir = cgroup_dir(&cg).expect("cgroup v2");
            Some(dir.parent().expect("a parent cgroup").to_path_buf())
        }
        Mode::Marks => None,
    };
    // A second process, still streaming, whose stream ends as the daemon goes.
    let m2 = mark();
    let (_, _s2, _) = start_forking(&envd, &m2, false, true).await;
    unsafe { libc::kill(envd.pid() as i32, libc::SIGTERM) };
    wait_until(Duration::from_secs(10), "the daemon exits on SIGTERM", || !envd.alive()).await;
    assert!(!is_running(pid), "the process outlived the daemon");
    assert_no_survivor(&m, &format!("{mode:?}: daemon SIGTERM")).await;
    assert_no_survivor(&m2, &format!("{mode:?}: daemon SIGTERM (PTY)")).await;
    if let Some(parent) = parent_dir {
        assert!(!parent.exists(), "the daemon left its cgroup {} behind", parent.display());
    }
}

#[tokio::test]
async fn sigterm_kills_every_process_cgroups() {
    shutdown(Mode::Cgroups).await;
}

#[tokio::test]
async fn sigterm_kills_every_process_marks() {
    shutdown(Mode::Marks).await;
}

/// A daemon killed with SIGKILL cannot clean up: its processes run on, found by nobody. The
/// next daemon started finds them (the dead daemon's cgroup, or its marks) and kills them.
async fn restart(mode: Mode) {
    let Some(mut first) = daemon(mode) else { return };
    let m = mark();
    let (pid, s, _) = start_forking(&first, &m, true, false).await;
    drop(s);
    unsafe { libc::kill(first.pid() as i32, libc::SIGKILL) };
    wait_until(STEP, "the first daemon is dead", || !first.alive()).await;
    assert!(is_running(pid), "the process outlives a SIGKILLed daemon (nothing could kill it)");
    let Some(mut second) = daemon(mode) else { return };
    assert_no_survivor(&m, &format!("{mode:?}: processes of a daemon that died, after the next start")).await;
    second.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn next_daemon_kills_what_a_dead_one_left_cgroups() {
    restart(Mode::Cgroups).await;
}

#[tokio::test]
async fn next_daemon_kills_what_a_dead_one_left_marks() {
    restart(Mode::Marks).await;
}

/// With cgroups, each process and everything it starts share one cgroup under the daemon's, and
/// the cgroup is removed once they are all gone; whether the child was created in it or moved
/// into it after fork.
#[tokio::test]
async fn each_process_has_its_own_cgroup() {
    each_process_has_its_own_cgroup_in(Mode::Cgroups).await;
}

#[tokio::test]
async fn each_process_has_its_own_cgroup_joined_after_fork() {
    each_process_has_its_own_cgroup_in(Mode::Joined).await;
}

async fn each_process_has_its_own_cgroup_in(mode: Mode) {
    let Some(mut envd) = daemon(mode) else { return };
    let daemon_cg = cgroup_of(envd.pid()).expect("the daemon's cgroup");
    let m = mark();
    let (pid, mut s, mut c) = start_forking(&envd, &m, true, false).await;
    let leader_cg = cgroup_of(pid).expect("the process's cgroup");
    let grandchild = wait_for_new_session(&m, pid).await;
    assert_eq!(cgroup_of(grandchild.pid).as_deref(), Some(leader_cg.as_str()), "the new session stays in the cgroup");
    assert_ne!(leader_cg, daemon_cg, "the process has a cgroup of its own");
    let parent = std::path::Path::new(&leader_cg).parent().expect("a parent cgroup").to_string_lossy().into_owned();
    assert!(parent.contains("hangar-envd."), "under the daemon's hangar-envd.* cgroup: {leader_cg}");
    let dir = cgroup_dir(&leader_cg).expect("cgroup v2");
    assert!(dir.is_dir(), "{} exists while the process runs", dir.display());
    let mut client = envd.process().await;
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("SendSignal");
    collect_into(&mut s, &mut c, STEP).await;
    assert_no_survivor(&m, "cgroups: SIGKILL").await;
    wait_until(Duration::from_secs(10), "the process's cgroup is removed", || !dir.exists()).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

/// Without cgroups every process carries `HANGAR_PROCESS`, and Info says which way kills find
/// what a process started (`process.cgroups` only with cgroups; `process.tree_kill` either way).
#[tokio::test]
async fn marks_and_capabilities_say_how_trees_are_found() {
    for mode in [Mode::Marks, Mode::Cgroups, Mode::Joined] {
        let Some(envd) = daemon(mode) else { continue };
        let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
        let has = |c: &str| info.capabilities.iter().any(|x| x == c);
        assert!(has("process.tree_kill"), "{mode:?}: {:?}", info.capabilities);
        assert_eq!(has("process.cgroups"), mode != Mode::Marks, "{mode:?}: {:?}", info.capabilities);
        let mut client = envd.process().await;
        let c = grpc_run(&mut client, bash("printf '%s' \"${HANGAR_PROCESS-none}\""), STEP).await;
        let mark = c.stdout_str();
        match mode {
            Mode::Marks => assert!(
                mark.contains(&format!(".{}.", envd.pid())) && mark.contains(':'),
                "the mark names the daemon instance and the process: {mark:?}"
            ),
            Mode::Cgroups | Mode::Joined => assert_eq!(mark, "none", "with cgroups there is no mark"),
        }
        // A request cannot set the mark in place of the daemon's.
        let mut req = bash("printf '%s' \"${HANGAR_PROCESS-none}\"");
        req.process.as_mut().expect("process").envs.insert("HANGAR_PROCESS".into(), "forged".into());
        let c = grpc_run(&mut client, req, STEP).await;
        if mode == Mode::Marks {
            assert_ne!(c.stdout_str(), "forged", "the daemon's mark wins");
        }
    }
}

/// A daemon that may not make cgroups (here: not root) detects it and falls back to marks, and
/// kills still reach new sessions; with `require` it refuses to start instead.
#[tokio::test]
async fn without_cgroup_rights_the_daemon_falls_back_to_marks() {
    if skip_without(is_root() && cgroups_usable(), "root (to start a daemon as nobody) and cgroup v2") {
        return;
    }
    let (uid, gid) = (65534, 65534);
    let mut envd = Envd::builder().run_as(uid, gid).env("HANGAR_ENVD_CGROUPS", "auto").start();
    let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    assert!(!info.capabilities.iter().any(|c| c == "process.cgroups"), "{:?}", info.capabilities);
    assert!(envd.log(20_000).contains("cgroups_unavailable"), "the fallback is logged: {}", envd.log(4000));
    let m = mark();
    let (pid, mut s, mut c) = start_forking(&envd, &m, true, false).await;
    let mut client = envd.process().await;
    within(
        STEP,
        "SendSignal",
        client.send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 }),
    )
    .await
    .expect("SendSignal SIGKILL");
    collect_into(&mut s, &mut c, STEP).await;
    assert_no_survivor(&m, "a daemon without cgroup rights").await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;

    for mode in ["require", "join"] {
        let out = std::process::Command::new(envd_bin())
            .args(["--listen", "127.0.0.1", "--port", "0", "--cgroups", mode])
            .uid(uid)
            .gid(gid)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run hangar-envd");
        assert!(!out.status.success(), "--cgroups {mode} without cgroup rights must refuse to start");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("cgroups are required (--cgroups {mode})")), "{err}");
    }
}
