//! The output ring: exact replay by absolute offsets, `since`, gaps, isolated subscribers and
//! the Start stream's backpressure.

use std::time::{Duration, Instant};

use hangar_e2e::*;
use pb::process_event::Event;

const RING: u64 = 262_144;

/// `seq 1 n` as bytes.
fn seq_output(n: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 1..=n {
        v.extend_from_slice(format!("{i}\n").as_bytes());
    }
    v
}

/// Runs `seq 1 n` to its end over gRPC; checks the Start stream carried every byte.
async fn run_seq(envd: &Envd, n: u32) -> (u32, Vec<u8>) {
    let expected = seq_output(n);
    let mut client = envd.process().await;
    let mut req = bash(&format!("seq 1 {n}"));
    req.stdin = Some(false);
    let c = grpc_run(&mut client, req, Duration::from_secs(30)).await;
    c.assert_well_formed();
    assert_eq!(c.end().exit_code, 0);
    assert_eq!(c.stdout.len(), expected.len(), "the Start stream is lossless");
    assert!(c.stdout == expected, "Start stream bytes differ from seq's output");
    (c.pid(), expected)
}

async fn attach_err(envd: &Envd, pid: u32, since: Option<u64>) -> tonic::Status {
    let mut procs = envd.processes().await;
    match attach(&mut procs, by_pid(pid), since).await {
        Err(st) => st,
        Ok(mut s) => {
            let log = collect_attach(&mut s, STEP).await;
            match log.error {
                Some(st) => st,
                None => panic!("Attach since={since:?} succeeded: {:?}", log.summary()),
            }
        }
    }
}

/// A process printed ~1.2 MiB into a 256 KiB ring: Attach without `since` replays exactly the
/// last 256 KiB with contiguous offsets, then the end.
#[tokio::test]
async fn attach_replays_exactly_the_ring() {
    let envd = Envd::start(&["--ring-bytes", &RING.to_string()]);
    let (pid, expected) = run_seq(&envd, 200_000).await;
    let total = expected.len() as u64;
    assert_eq!(total, 1_288_895);

    let mut procs = envd.processes().await;
    let mut s = attach(&mut procs, by_pid(pid), None).await.expect("Attach");
    let log = collect_attach(&mut s, STEP).await;
    assert!(log.error.is_none(), "{:?}", log.summary());
    let start = log.start().clone();
    assert_eq!(start.pid, pid);
    assert_eq!(start.oldest_offset, total - RING, "oldest offset: {:?}", log.summary());
    assert_eq!(start.next_offset, total, "next offset: {:?}", log.summary());
    assert!(log.gaps.is_empty(), "no gap without since: {:?}", log.summary());
    let after = log.assert_contiguous_from(start.oldest_offset);
    assert_eq!(after, total);
    assert_eq!(log.data.len() as u64, RING);
    assert!(
        log.data[..] == expected[(total - RING) as usize..],
        "replayed bytes differ from the last 256 KiB of the output"
    );
    for ev in &log.events {
        if let ext::attach_event::Event::Data(d) = ev {
            assert_eq!(d.stream, ext::OutputStream::Stdout as i32, "data stream");
        }
    }
    let end = log.end();
    assert_eq!(end.total_bytes, total);
    let exit = end.exit.clone().expect("end.exit");
    assert_eq!(exit.exit_code, 0);
    assert_eq!(exit.status, "exit status 0");
    assert_eq!(exit.signal, None);
    assert!(exit.ended_at.is_some(), "ended_at set");
}

/// `since: 0` on a ring that lost its head: start, gap{0, oldest}, then the ring.
#[tokio::test]
async fn attach_since_zero_reports_gap() {
    let envd = Envd::start(&["--ring-bytes", &RING.to_string()]);
    let (pid, expected) = run_seq(&envd, 200_000).await;
    let total = expected.len() as u64;
    let oldest = total - RING;

    let mut procs = envd.processes().await;
    let mut s = attach(&mut procs, by_pid(pid), Some(0)).await.expect("Attach");
    let log = collect_attach(&mut s, STEP).await;
    assert!(log.error.is_none(), "{:?}", log.summary());
    assert_eq!(log.start().oldest_offset, oldest);
    match log.events.get(1) {
        Some(ext::attach_event::Event::Gap(g)) => assert_eq!((g.from, g.to), (0, oldest)),
        other => panic!("second event must be gap{{0,{oldest}}}, got {other:?}"),
    }
    assert_eq!(log.gaps.len(), 1, "{:?}", log.summary());
    assert_eq!(log.assert_contiguous_from(0), total);
    assert!(log.data[..] == expected[oldest as usize..], "replayed bytes differ");
    assert_eq!(log.end().total_bytes, total);
}

/// `since` inside the ring gives exactly the bytes from there; at the end, nothing but the end;
/// beyond the end, out_of_range.
#[tokio::test]
async fn attach_since_mid_ring_and_beyond() {
    let envd = Envd::start(&["--ring-bytes", &RING.to_string()]);
    let (pid, expected) = run_seq(&envd, 200_000).await;
    let total = expected.len() as u64;
    let oldest = total - RING;

    for since in [total - 1000, oldest + 12_345, oldest, total - 1] {
        let mut procs = envd.processes().await;
        let mut s = attach(&mut procs, by_pid(pid), Some(since)).await.expect("Attach");
        let log = collect_attach(&mut s, STEP).await;
        assert!(log.error.is_none(), "since={since}: {:?}", log.summary());
        assert!(log.gaps.is_empty(), "since={since}: {:?}", log.summary());
        match log.events.get(1) {
            Some(ext::attach_event::Event::Data(d)) => assert_eq!(d.offset, since, "first data offset"),
            other => panic!("since={since}: second event must be data, got {other:?}"),
        }
        assert_eq!(log.assert_contiguous_from(since), total);
        assert!(
            log.data[..] == expected[since as usize..],
            "since={since}: bytes differ ({} vs {})",
            log.data.len(),
            total - since
        );
    }

    // exactly at the end: start, end
    let mut procs = envd.processes().await;
    let mut s = attach(&mut procs, by_pid(pid), Some(total)).await.expect("Attach at the end");
    let log = collect_attach(&mut s, STEP).await;
    assert!(log.error.is_none(), "{:?}", log.summary());
    assert!(log.data.is_empty() && log.gaps.is_empty(), "{:?}", log.summary());
    assert_eq!(log.end().total_bytes, total);

    for since in [total + 1, total + 1_000_000] {
        let st = attach_err(&envd, pid, Some(since)).await;
        assert_eq!(st.code(), tonic::Code::OutOfRange, "since={since}: {st:?}");
    }
}

/// Attach to a running process: replay of what is there, then live output, then the end.
#[tokio::test]
async fn attach_live_then_end() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut start) = grpc_start(&mut client, bash("echo one; read x; echo two")).await;
    let mut c = Collected::default();
    read_until(&mut start, &mut c, STEP, "one", |c| c.stdout_str() == "one\n").await;

    let mut procs = envd.processes().await;
    let mut s = attach(&mut procs, by_pid(pid), None).await.expect("Attach");
    // replay of "one\n" then wait for live data
    let mut log = AttachLog::default();
    while log.data.len() < 4 {
        match within(STEP, "attach replay", s.message()).await {
            Ok(Some(m)) => log.push(m.event.and_then(|e| e.event).expect("event")),
            other => panic!("attach stream ended early: {other:?}; {:?}", log.summary()),
        }
    }
    assert_eq!(log.start().oldest_offset, 0);
    assert_eq!(log.start().next_offset, 4);
    assert_eq!(log.data, b"one\n");
    client
        .send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"x\n") })
        .await
        .expect("SendInput");
    collect_attach_into(&mut s, &mut log, STEP).await;
    assert_eq!(log.data, b"one\ntwo\n");
    assert_eq!(log.assert_contiguous_from(0), 8);
    assert_eq!(log.end().total_bytes, 8);
    collect_into(&mut start, &mut c, STEP).await;
    assert_eq!(c.stdout_str(), "one\ntwo\n");
}

/// Checks every data event of `log` against `expected` at its offset.
fn assert_data_matches(log: &AttachLog, expected: &[u8], who: &str) {
    for ev in &log.events {
        if let ext::attach_event::Event::Data(d) = ev {
            let o = d.offset as usize;
            assert!(
                o + d.data.len() <= expected.len() && d.data[..] == expected[o..o + d.data.len()],
                "{who}: data at offset {o} (len {}) differs from the output",
                d.data.len()
            );
        }
    }
}

/// A subscriber that reads nothing does not delay another one; when it is finally read it
/// reports a gap and goes on to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_subscriber_does_not_delay_another() {
    let envd = Envd::start(&[]);
    let n = 2_000_000;
    let expected = seq_output(n);
    let total = expected.len() as u64;

    let mut client = envd.process().await;
    let (pid, mut start) = grpc_start(&mut client, bash(&format!("read x; seq 1 {n}"))).await;
    // the Start stream is drained all along, so it never holds the process back
    let drain = tokio::spawn(async move { collect(&mut start, Duration::from_secs(60)).await });

    // A: attached (start event read) and then left alone. B: read to the end.
    let mut procs_a = envd.processes().await;
    let mut a = attach(&mut procs_a, by_pid(pid), None).await.expect("Attach A");
    let mut log_a = AttachLog::default();
    match within(STEP, "A start", a.message()).await {
        Ok(Some(m)) => log_a.push(m.event.and_then(|e| e.event).expect("event")),
        other => panic!("A: {other:?}"),
    }
    let mut procs_b = envd.processes().await;
    let mut b = attach(&mut procs_b, by_pid(pid), None).await.expect("Attach B");
    let mut log_b = AttachLog::default();
    match within(STEP, "B start", b.message()).await {
        Ok(Some(m)) => log_b.push(m.event.and_then(|e| e.event).expect("event")),
        other => panic!("B: {other:?}"),
    }

    client
        .send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"go\n") })
        .await
        .expect("SendInput");

    let t = Instant::now();
    collect_attach_into(&mut b, &mut log_b, Duration::from_secs(45)).await;
    let b_time = t.elapsed();
    assert!(log_b.error.is_none(), "B: {:?}", log_b.summary());
    assert_eq!(log_b.start().oldest_offset, 0);
    assert_eq!(log_b.assert_contiguous_from(0), total, "B");
    assert_eq!(log_b.end().total_bytes, total);
    assert_data_matches(&log_b, &expected, "B");
    if log_b.gaps.is_empty() {
        assert!(log_b.data == expected, "B read everything");
    }

    let c = within(Duration::from_secs(60), "Start stream drain", drain).await.expect("drain task");
    assert_eq!(c.stdout.len() as u64, total, "the Start stream is lossless");

    // Now read A.
    collect_attach_into(&mut a, &mut log_a, Duration::from_secs(30)).await;
    assert!(log_a.error.is_none(), "A: {:?}", log_a.summary());
    assert!(
        !log_a.gaps.is_empty(),
        "the stalled subscriber must report a gap (B took {b_time:?}): {:?}",
        log_a.summary()
    );
    assert_eq!(log_a.assert_contiguous_from(0), total, "A");
    assert_data_matches(&log_a, &expected, "A");
    assert_eq!(log_a.end().total_bytes, total);
}

fn read_counter(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Only the Start stream slows the process: not reading it stops the process; reading it
/// lets the process go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_stream_backpressure() {
    let envd = Envd::start(&[]);
    let dir = std::env::temp_dir().join(format!("hangar-e2e-bp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counter = dir.join("counter");
    let _ = std::fs::remove_file(&counter);

    let mut client = envd.process().await;
    let script = format!(
        "i=0; while :; do i=$((i+1)); printf '%d\\n' $i > {c}; head -c 65536 /dev/zero; done",
        c = counter.display()
    );
    let mut req = bash(&script);
    req.stdin = Some(false);
    let (pid, mut s) = grpc_start(&mut client, req).await;

    // Not reading: the counter must come to a stop (unchanged for 1.5 s).
    let t = Instant::now();
    let mut last = None;
    let mut stable_since = Instant::now();
    let stalled = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = read_counter(&counter);
        match now {
            Some(v) if now == last => {
                if stable_since.elapsed() >= Duration::from_millis(1500) {
                    break v;
                }
            }
            _ => {
                last = now;
                stable_since = Instant::now();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the process kept going while its Start stream was not read (counter {last:?})"
        );
    };
    assert!(stalled > 0);
    // An Attach subscriber reading does not unblock it.
    let mut procs = envd.processes().await;
    let mut a = attach(&mut procs, by_pid(pid), None).await.expect("Attach");
    let mut log = AttachLog::default();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(600) {
        match tokio::time::timeout(Duration::from_millis(100), a.message()).await {
            Ok(Ok(Some(m))) => log.push(m.event.and_then(|e| e.event).expect("event")),
            Ok(other) => panic!("attach ended: {other:?}"),
            Err(_) => {}
        }
    }
    assert_eq!(read_counter(&counter), Some(stalled), "an Attach subscriber must not drive the process");

    // Reading the Start stream lets it go on.
    let t = Instant::now();
    let mut bytes = 0usize;
    loop {
        match next_event(&mut s, STEP).await {
            Ok(Some(Event::Data(d))) => {
                if let Some(pb::process_event::data_event::Output::Stdout(b)) = d.output {
                    bytes += b.len();
                }
            }
            Ok(Some(_)) => {}
            other => panic!("Start stream ended: {other:?}"),
        }
        if read_counter(&counter).is_some_and(|c| c > stalled + 5) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "counter did not move on after reading {bytes} bytes of the Start stream"
        );
    }
    client
        .send_signal(pb::SendSignalRequest { process: by_pid(pid), signal: pb::Signal::Sigkill as i32 })
        .await
        .expect("kill");
    let c = collect(&mut s, Duration::from_secs(30)).await;
    assert!(c.end.is_some(), "end after kill");
    let _ = std::fs::remove_dir_all(&dir);
}

/// E2B issue 1587: an E2B Connect subscriber over HTTP/1.1 that reads nothing must not wedge
/// the process, the Start stream or another Connect subscriber; read at last, it still ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_e2b_connect_does_not_wedge_others() {
    let envd = Envd::start(&[]);
    let n = 2_000_000;
    let total = seq_output(n).len();
    let mut client = envd.process().await;
    let (pid, mut start) = grpc_start(&mut client, bash(&format!("read x; seq 1 {n}"))).await;
    let drain = tokio::spawn(async move { collect(&mut start, Duration::from_secs(60)).await });

    // the stalled one: Connect JSON over HTTP/1.1, start event read, then left alone
    let mut stalled =
        envd.open_stream("/process.Process/Connect", &serde_json::json!({"process": {"pid": pid}}), &[]).await;
    assert_eq!(stalled.status, 200);
    let first = stalled.next_within(STEP).await.expect("envelope").expect("start");
    assert!(first.json()["event"].get("start").is_some(), "{}", first.json());

    // the active one: gRPC Connect
    let mut active = client.connect(pb::ConnectRequest { process: by_pid(pid) }).await.expect("Connect").into_inner();
    match next_event(&mut active, STEP).await {
        Ok(Some(Event::Start(_))) => {}
        other => panic!("want start, got {other:?}"),
    }
    client.send_input(pb::SendInputRequest { process: by_pid(pid), input: stdin_input(b"go\n") }).await.unwrap();

    let c = within(Duration::from_secs(60), "Start stream to its end", drain).await.expect("drain");
    assert_eq!(c.stdout.len(), total, "the Start stream is lossless");
    assert_eq!(c.end().exit_code, 0);
    let a = collect(&mut active, Duration::from_secs(30)).await;
    assert_eq!(a.end().exit_code, 0, "the active Connect reached the end");

    // now read the stalled one: it must end too (E2B Connect has no gap event: bytes may be missing)
    let out = stalled.collect(Duration::from_secs(30)).await;
    out.assert_clean_end();
    let sc = out.collected();
    assert_eq!(sc.end().exit_code, 0, "{:?}", sc.end);
    assert!(sc.stdout.len() <= total);
}

/// hangar Attach over Connect JSON: 64-bit offsets as strings, the stream enum by name.
#[tokio::test]
async fn attach_over_connect_json() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let c = grpc_run(&mut client, bash("printf 0123456789"), STEP).await;
    let pid = c.pid();
    let out = envd
        .server_stream(
            "/hangar.envd.v1.Processes/Attach",
            &serde_json::json!({"process": {"pid": pid}, "since": "4"}),
            &[],
            STEP,
        )
        .await;
    out.assert_clean_end();
    let ev: Vec<&serde_json::Value> = out.messages.iter().map(|m| &m["event"]).collect();
    assert_eq!(ev[0]["start"]["pid"], serde_json::json!(pid), "{out:#?}");
    assert_eq!(ev[0]["start"]["nextOffset"], serde_json::json!("10"), "{out:#?}");
    let data = &ev[1]["data"];
    assert_eq!(data["offset"], serde_json::json!("4"), "{out:#?}");
    assert_eq!(data["stream"], serde_json::json!("OUTPUT_STREAM_STDOUT"), "{out:#?}");
    let mut bytes = Vec::new();
    for e in &ev[1..] {
        if let Some(d) = e.get("data") {
            bytes.extend(unb64(d["data"].as_str().expect("base64")));
        }
    }
    assert_eq!(bytes, b"456789");
    let end = &ev.last().unwrap()["end"];
    assert_eq!(end["totalBytes"], serde_json::json!("10"), "{out:#?}");
    assert_eq!(end["exit"]["status"], serde_json::json!("exit status 0"), "{out:#?}");
}

/// Keepalives on a quiet Attach stream.
#[tokio::test]
async fn attach_keepalives() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let (pid, mut s) = grpc_start(&mut client, start_req("/bin/sleep", &["2.5"])).await;
    let mut procs = envd.processes().await;
    let req = with_meta(
        tonic::Request::new(ext::AttachRequest { process: by_pid(pid), since: None }),
        "keepalive-ping-interval",
        "1",
    );
    let mut a = procs.attach(req).await.expect("Attach").into_inner();
    let log = collect_attach(&mut a, STEP).await;
    assert!(log.keepalives >= 1, "no keepalive in 2.5 s at 1 s: {:?}", log.summary());
    assert!(log.end.is_some());
    collect(&mut s, STEP).await;
}

/// The Start stream loses nothing while it is backpressured, stderr included: stdout pieces
/// with stderr lines between them, a stderr burst while stdout is stalled, a reader that starts
/// late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_stream_lossless_with_stderr_under_backpressure() {
    let envd = Envd::start(&[]);
    let mut client = envd.process().await;
    let script = "(sleep 0.5; head -c 100000 /dev/zero | tr '\\0' E >&2) & \
                  for i in $(seq 1 64); do head -c 65536 /dev/zero | tr '\\0' o; printf 'e%03d\\n' $i >&2; done; wait";
    let mut req = bash(script);
    req.stdin = Some(false);
    let (pid, mut s) = grpc_start(&mut client, req).await;
    // let the stream fill up and the process stall before reading anything
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = collect(&mut s, Duration::from_secs(30)).await;
    assert_eq!(c.end().exit_code, 0, "{:?}", c.end);
    assert_eq!(c.stdout.len(), 64 * 65536, "stdout bytes");
    assert!(c.stdout.iter().all(|&b| b == b'o'), "stdout content");
    let err = c.stderr_str();
    let burst = err.matches('E').count();
    assert_eq!(burst, 100_000, "the stderr burst written while stdout was stalled");
    let lines: String = err.chars().filter(|&ch| ch != 'E').collect();
    let want: String = (1..=64).map(|i| format!("e{i:03}\n")).collect();
    assert_eq!(lines, want, "stderr lines");
    // and the ring agrees on the total
    let mut procs = envd.processes().await;
    let mut a = attach(&mut procs, by_pid(pid), None).await.expect("Attach");
    let log = collect_attach(&mut a, STEP).await;
    assert_eq!(log.end().total_bytes as usize, c.stdout.len() + c.stderr.len());
}
