//! The daemon reaps everything: many short processes, and orphans reparented to it.

use std::time::Duration;

use futures::future::join_all;
use hangar_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_short_processes_leave_no_zombie() {
    const RUNS: usize = 300;
    let mut envd = Envd::start(&[]);
    let client = envd.process().await;
    // Each process exits with its own code, so an end event counts only if it is its process's.
    let code = |i: usize| (i % 100) as i32 + 1;
    let mut ended = Vec::with_capacity(RUNS);
    for batch in 0..RUNS / 50 {
        let runs = (batch * 50..(batch + 1) * 50).map(|i| {
            let mut c = client.clone();
            async move {
                let mut req = start_req("/bin/sh", &["-c", &format!("exit {}", code(i))]);
                req.stdin = Some(false);
                (i, grpc_run(&mut c, req, Duration::from_secs(30)).await)
            }
        });
        ended.extend(join_all(runs).await);
    }
    let wrong: Vec<_> = ended
        .iter()
        .filter(|(i, c)| !matches!(&c.end, Some(e) if e.exited && e.exit_code == code(*i)))
        .map(|(i, c)| format!("#{i} (want exit {}): {:?}", code(*i), c.end))
        .collect();
    assert!(wrong.is_empty(), "{} of {RUNS} runs did not end with their own exit code: {wrong:#?}", wrong.len());
    for (_, c) in &ended {
        c.assert_well_formed();
    }
    let me = envd.pid();
    wait_until(Duration::from_secs(5), "no zombie child of the daemon", || zombies_of(me).is_empty()).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn orphans_are_reaped() {
    let mut envd = Envd::start(&[]);
    let me = envd.pid();
    let mut client = envd.process().await;
    // orphans that live until this file goes away (no race with how long the starts take)
    let flag = std::env::temp_dir().join(format!("hangar-e2e-orphans-{}", std::process::id()));
    std::fs::write(&flag, b"").unwrap();
    let script = format!(
        "(exec </dev/null >/dev/null 2>&1; while [ -e {f} ]; do sleep 0.05; done) & exit 0",
        f = flag.display()
    );
    for _ in 0..20 {
        let mut req = bash(&script);
        req.stdin = Some(false);
        let c = grpc_run(&mut client, req, STEP).await;
        assert_eq!(c.end().exit_code, 0, "{c:?}");
    }
    // the daemon is a child subreaper: the orphaned subshells are now its children
    let orphans = || children_of(me).into_iter().filter(|p| p.comm == "bash" && p.state != 'Z').count();
    wait_until(STEP, "20 orphaned subshells reparented to the daemon", || orphans() >= 20).await;
    // ... and once they end, it reaps them
    std::fs::remove_file(&flag).unwrap();
    wait_until(Duration::from_secs(8), "orphans gone and reaped", || descendants(me).is_empty()).await;
    assert!(zombies_of(me).is_empty());
    // a mix of shells that leave orphans and plain processes, concurrently
    let runs = (0..40).map(|i| {
        let mut c = client.clone();
        async move {
            let script = if i % 2 == 0 { "(sleep 0.2 </dev/null >/dev/null 2>&1 &); exit 0" } else { "true" };
            grpc_run(&mut c, bash(script), Duration::from_secs(30)).await
        }
    });
    for c in join_all(runs).await {
        assert_eq!(c.end().exit_code, 0);
    }
    wait_until(Duration::from_secs(8), "no zombies and no descendants", || descendants(me).is_empty()).await;
    envd.assert_healthy_no_leaks(Duration::from_secs(1)).await;
}
