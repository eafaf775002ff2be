//! Directory watches: E2B's `WatchDir` stream and polling trio, hangar's `Files/WatchDir`, their
//! limits, loss reporting and errors.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    time::{Duration, Instant},
};

use hangar_e2e::{watch::*, *};
use serde_json::json;

const SHORT: Duration = Duration::from_millis(400);

fn touch(p: &std::path::Path) {
    fs::write(p, b"").unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
}

/// The code of a failed call, by its Connect name.
fn code(st: &tonic::Status) -> &'static str {
    code_name(st.code())
}

#[tokio::test]
async fn watch_needs_an_existing_directory() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-errors");
    let file = dir.join("file");
    touch(&file);
    let missing = dir.join("missing");
    let mut fs_client = envd.filesystem().await;
    let mut files = envd.files().await;

    for (path, want) in [(&missing, "not_found"), (&file, "invalid_argument")] {
        let st = E2bWatch::open(&mut fs_client, watch_req(path, false, false)).await.err().expect("WatchDir must fail");
        assert_eq!(code(&st), want, "E2B WatchDir on {}: {st:?}", path.display());
        let st = HangarWatch::open(&mut files, watch_req(path, true, false)).await.err().expect("must fail");
        assert_eq!(code(&st), want, "Files/WatchDir on {}: {st:?}", path.display());
        let st = fs_client
            .create_watcher(fspb::CreateWatcherRequest {
                path: path.to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .expect_err("CreateWatcher must fail");
        assert_eq!(code(&st), want, "CreateWatcher on {}: {st:?}", path.display());
    }
    let st =
        E2bWatch::open(&mut fs_client, watch_req(std::path::Path::new(""), false, false)).await.err().expect("empty");
    assert_eq!(code(&st), "invalid_argument");

    // Over Connect JSON, as the SDKs call it: HTTP 404 and 400 with the code in the body.
    let (status, body) =
        envd.unary("/filesystem.Filesystem/CreateWatcher", &json!({"path": missing.to_string_lossy()})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let out = envd
        .server_stream("/filesystem.Filesystem/WatchDir", &json!({"path": file.to_string_lossy()}), &[], STEP)
        .await;
    assert_eq!(out.error_code().as_deref(), Some("invalid_argument"), "{out:?}");
}

/// Start first, then each kind of change with its name relative to the watched directory.
#[tokio::test]
async fn each_kind_of_change() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-kinds");
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), false, false)).await.expect("watch");

    let a = dir.join("a.txt");
    touch(&a);
    w.until(STEP, "create a.txt", |s| has(s, "a.txt", "create")).await;
    fs::write(&a, b"hello").expect("write");
    w.until(STEP, "write a.txt", |s| has(s, "a.txt", "write")).await;
    fs::set_permissions(&a, fs::Permissions::from_mode(0o600)).expect("chmod");
    w.until(STEP, "chmod a.txt", |s| has(s, "a.txt", "chmod")).await;
    fs::rename(&a, dir.join("b.txt")).expect("rename");
    w.until(STEP, "rename a.txt, create b.txt", |s| has(s, "a.txt", "rename") && has(s, "b.txt", "create")).await;
    fs::remove_file(dir.join("b.txt")).expect("remove");
    w.until(STEP, "remove b.txt", |s| has(s, "b.txt", "remove")).await;
    fs::create_dir(dir.join("sub")).expect("mkdir");
    w.until(STEP, "create sub", |s| has(s, "sub", "create")).await;
    fs::remove_dir(dir.join("sub")).expect("rmdir");
    w.until(STEP, "remove sub", |s| has(s, "sub", "remove")).await;

    // In the order they happened; no entry unless asked.
    let order = summary(&w.seen);
    let pos = |x: &str| order.iter().position(|s| s == x).unwrap_or_else(|| panic!("{x} missing from {order:?}"));
    assert!(pos("create a.txt") < pos("write a.txt"));
    assert!(pos("write a.txt") < pos("chmod a.txt"));
    assert!(pos("chmod a.txt") < pos("rename a.txt"));
    assert!(pos("rename a.txt") < pos("remove b.txt"));
    assert!(w.seen.iter().all(|s| s.entry.is_none()), "entries were not asked for");
}

#[tokio::test]
async fn include_entry_describes_created_written_and_chmodded_entries() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-entry");
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), true, true)).await.expect("watch");
    let f = dir.join("f.bin");
    touch(&f);
    w.until(STEP, "create f.bin", |s| has(s, "f.bin", "create")).await;
    fs::write(&f, b"12345").expect("write");
    w.until(STEP, "write f.bin of 5 bytes", |s| {
        s.iter().any(|e| e.name == "f.bin" && e.kind == "write" && e.entry.as_ref().is_some_and(|x| x.size == 5))
    })
    .await;
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).expect("chmod");
    w.until(STEP, "chmod f.bin", |s| has(s, "f.bin", "chmod")).await;
    fs::create_dir(dir.join("d")).expect("mkdir");
    w.until(STEP, "create d", |s| has(s, "d", "create")).await;
    fs::remove_file(&f).expect("rm");
    w.until(STEP, "remove f.bin", |s| has(s, "f.bin", "remove")).await;

    let create = w.seen.iter().find(|e| e.name == "f.bin" && e.kind == "create").expect("create");
    let entry = create.entry.as_ref().expect("create carries the entry");
    assert_eq!(entry.name, "f.bin");
    assert_eq!(entry.path, f.to_string_lossy());
    assert_eq!(entry.r#type, fspb::FileType::File as i32);
    let chmod = w.seen.iter().rev().find(|e| e.name == "f.bin" && e.kind == "chmod").expect("chmod");
    assert_eq!(chmod.entry.as_ref().expect("chmod carries the entry").mode & 0o777, 0o640);
    let d = w.seen.iter().find(|e| e.name == "d" && e.kind == "create").expect("create d");
    assert_eq!(d.entry.as_ref().expect("entry").r#type, fspb::FileType::Directory as i32);
    let remove = w.seen.iter().find(|e| e.name == "f.bin" && e.kind == "remove").expect("remove");
    assert!(remove.entry.is_none(), "a removed entry has no info: {remove:?}");
}

/// Directories created inside a recursive watch are watched from the moment they appear, and
/// what was created in them before their watch could be added is reported as created too.
#[tokio::test]
async fn recursive_watch_follows_new_directories() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-recursive");
    fs::create_dir_all(dir.join("old/deep")).expect("mkdir old");
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), true, false)).await.expect("watch");

    // Existing subdirectories are watched.
    touch(&dir.join("old/deep/x"));
    w.until(STEP, "create old/deep/x", |s| has(s, "old/deep/x", "create")).await;

    // A tree and a file in it, created faster than any watch could be added.
    fs::create_dir_all(dir.join("a/b/c")).expect("mkdir -p");
    fs::write(dir.join("a/b/c/f"), b"1").expect("write f");
    fs::write(dir.join("a/g"), b"2").expect("write g");
    w.until(STEP, "the whole new tree", |s| {
        ["a", "a/b", "a/b/c", "a/b/c/f", "a/g"].iter().all(|n| has(s, n, "create"))
    })
    .await;

    // The deepest new directory is watched too.
    fs::write(dir.join("a/b/c/f"), b"more").expect("write again");
    fs::write(dir.join("a/b/c/h"), b"3").expect("write h");
    w.until(STEP, "write a/b/c/f, create a/b/c/h", |s| has(s, "a/b/c/f", "write") && has(s, "a/b/c/h", "create")).await;
    for n in ["a", "a/b", "a/b/c", "a/b/c/f", "a/g", "a/b/c/h"] {
        assert_eq!(count(&w.seen, n, "create"), 1, "{n} created once: {:?}", summary(&w.seen));
    }
    // Creations come parent first.
    let pos = |n: &str| w.seen.iter().position(|s| s.name == n && s.kind == "create").expect("created");
    assert!(pos("a") < pos("a/b") && pos("a/b") < pos("a/b/c") && pos("a/b/c") < pos("a/b/c/f"));
}

#[tokio::test]
async fn recursive_watch_of_a_tree_made_by_another_process() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-mkdirp");
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), true, false)).await.expect("watch");
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("mkdir -p p/q/r && echo hi > p/q/r/file && touch p/top")
        .current_dir(dir.path())
        .status()
        .expect("sh");
    assert!(status.success());
    w.until(STEP, "p, p/q, p/q/r, p/q/r/file, p/top", |s| {
        ["p", "p/q", "p/q/r", "p/q/r/file", "p/top"].iter().all(|n| has(s, n, "create"))
    })
    .await;
}

#[tokio::test]
async fn non_recursive_watch_sees_only_its_own_entries() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-flat");
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), false, false)).await.expect("watch");
    fs::create_dir(dir.join("sub")).expect("mkdir");
    w.until(STEP, "create sub", |s| has(s, "sub", "create")).await;
    touch(&dir.join("sub/inner"));
    touch(&dir.join("marker"));
    w.until(STEP, "create marker", |s| has(s, "marker", "create")).await;
    w.drain_for(SHORT).await;
    assert!(!w.seen.iter().any(|s| s.name.starts_with("sub/")), "{:?}", summary(&w.seen));
}

/// A directory moved into the tree is watched and its contents reported; one moved out is
/// forgotten.
#[tokio::test]
async fn directories_moved_in_and_out() {
    let envd = Envd::start(&[]);
    let outside = Scratch::new("watch-outside");
    let dir = Scratch::new("watch-moves");
    fs::create_dir_all(outside.join("m/n")).expect("mkdir");
    touch(&outside.join("m/n/file"));
    let mut w = E2bWatch::open(&mut envd.filesystem().await, watch_req(dir.path(), true, false)).await.expect("watch");

    fs::rename(outside.join("m"), dir.join("m")).expect("move in");
    w.until(STEP, "m and its contents", |s| ["m", "m/n", "m/n/file"].iter().all(|n| has(s, n, "create"))).await;
    fs::write(dir.join("m/n/file"), b"x").expect("write");
    w.until(STEP, "write m/n/file", |s| has(s, "m/n/file", "write")).await;

    fs::rename(dir.join("m"), dir.join("renamed")).expect("rename inside");
    w.until(STEP, "rename m, create renamed/...", |s| {
        has(s, "m", "rename") && has(s, "renamed", "create") && has(s, "renamed/n/file", "create")
    })
    .await;
    fs::write(dir.join("renamed/n/file"), b"y").expect("write");
    w.until(STEP, "write renamed/n/file", |s| has(s, "renamed/n/file", "write")).await;

    fs::rename(dir.join("renamed"), outside.join("back")).expect("move out");
    w.until(STEP, "rename renamed", |s| has(s, "renamed", "rename")).await;
    fs::write(outside.join("back/n/file"), b"z").expect("write outside");
    touch(&dir.join("marker"));
    w.until(STEP, "create marker", |s| has(s, "marker", "create")).await;
    w.drain_for(SHORT).await;
    let after: Vec<String> = summary(&w.seen).into_iter().skip_while(|s| s != "rename renamed").collect();
    assert!(after.iter().all(|s| !s.contains("/n/file")), "nothing from the moved-out tree: {after:?}");
}

#[tokio::test]
async fn removing_the_watched_directory_ends_the_watch() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-gone");
    let root = dir.join("root");
    fs::create_dir_all(root.join("sub")).expect("mkdir");
    let mut e2b = E2bWatch::open(&mut envd.filesystem().await, watch_req(&root, true, false)).await.expect("watch");
    let mut hangar = HangarWatch::open(&mut envd.files().await, watch_req(&root, true, false)).await.expect("watch");
    fs::remove_dir_all(&root).expect("rm -rf");
    assert!(e2b.to_end(STEP).await.is_ok(), "a clean end: {:?}", e2b.ended);
    assert!(has(&e2b.seen, ".", "remove"), "{:?}", summary(&e2b.seen));
    assert!(has(&e2b.seen, "sub", "remove"), "{:?}", summary(&e2b.seen));
    assert!(hangar.to_end(STEP).await.is_ok(), "a clean end: {:?}", hangar.ended);
    assert!(has(&hangar.seen(), ".", "remove"), "{:?}", hangar.short());
}

/// hangar's stream numbers its events and goes on after a loss, saying how many were dropped.
#[tokio::test]
async fn hangar_watch_numbers_events_and_reports_overflow() {
    let envd = Envd::start(&["--watch-queue-events", "16"]);
    let dir = Scratch::new("watch-overflow");
    let mut client = ext::files_client::FilesClient::new(envd.narrow_channel(16 * 1024).await);
    let mut w = HangarWatch::open(&mut client, watch_req(dir.path(), false, true)).await.expect("watch");
    touch(&dir.join("first"));
    w.until(STEP, "create first", |e| e.iter().any(|x| matches!(x, HangarEv::Fs { seen, .. } if seen.name == "first")))
        .await;
    assert!(matches!(w.events[0], HangarEv::Fs { seq: 1, .. }), "{:?}", w.short());

    // Not reading while far more changes happen than the queue and the transport's window hold
    // (long names and entries make each event large: 3000 are about 1.5 MB).
    let long = "n".repeat(200);
    for i in 0..3000 {
        touch(&dir.join(format!("{long}{i:05}")));
    }
    // Everything up to the last creation, delivered or counted as dropped: the queue is empty.
    w.until(STEP, "seq 3001", |e| {
        e.iter().any(|x| matches!(x, HangarEv::Fs { seq: 3001, .. } | HangarEv::Overflow { seq: 3001, .. }))
    })
    .await;
    assert!(w.events.iter().any(|x| matches!(x, HangarEv::Overflow { .. })), "an overflow: {:?}", w.short());
    touch(&dir.join("after"));
    w.until(STEP, "create after", |e| e.iter().any(|x| matches!(x, HangarEv::Fs { seen, .. } if seen.name == "after")))
        .await;

    // Numbers: consecutive except across an overflow, which accounts for the dropped ones.
    let mut last = 0;
    let mut dropped_total = 0;
    for e in &w.events {
        match e {
            HangarEv::Fs { seq, .. } => {
                assert_eq!(*seq, last + 1, "consecutive: {:?}", w.short());
                last = *seq;
            }
            HangarEv::Overflow { seq, dropped } => {
                assert!(*dropped > 0, "this queue dropped events: {:?}", w.short());
                assert_eq!(*seq, last + dropped, "overflow's seq is the last dropped: {:?}", w.short());
                dropped_total += dropped;
                last = *seq;
            }
            HangarEv::KeepAlive { .. } => {}
        }
    }
    let delivered = w.seen().len() as u64;
    assert_eq!(delivered + dropped_total, last, "every numbered event delivered or counted as dropped");
    assert!(matches!(w.events.last(), Some(HangarEv::Fs { seq: 3002, .. })), "after is #3002: {:?}", w.short());

    // The watch goes on.
    touch(&dir.join("later"));
    w.until(STEP, "create later", |e| e.iter().any(|x| matches!(x, HangarEv::Fs { seen, .. } if seen.name == "later")))
        .await;
}

/// E2B's stream has no overflow event: it sends the events before the loss, then ends with
/// `data_loss` so the client knows to rescan.
#[tokio::test]
async fn e2b_watch_ends_with_data_loss_on_overflow() {
    let envd = Envd::start(&["--watch-queue-events", "16"]);
    let dir = Scratch::new("watch-e2b-overflow");
    let mut client = fspb::filesystem_client::FilesystemClient::new(envd.narrow_channel(16 * 1024).await);
    let mut w = E2bWatch::open(&mut client, watch_req(dir.path(), false, true)).await.expect("watch");
    let long = "n".repeat(200);
    for i in 0..3000 {
        touch(&dir.join(format!("{long}{i:05}")));
    }
    let end = w.to_end(Duration::from_secs(20)).await;
    let st = end.expect_err("the stream must end with an error");
    assert_eq!(code(&st), "data_loss", "{st:?}");
    assert!(st.message().contains("rescan"), "{st:?}");
    assert!(!w.seen.is_empty() && w.seen.len() < 3000, "a prefix was delivered: {}", w.seen.len());
    for (i, s) in w.seen.iter().enumerate() {
        assert_eq!(s.name, format!("{long}{i:05}"), "the delivered events are the first ones, in order");
    }
}

#[tokio::test]
async fn polled_watcher_reports_loss_as_data_loss() {
    let envd = Envd::start(&["--watch-queue-events", "16"]);
    let dir = Scratch::new("watch-poll-loss");
    let mut c = envd.filesystem().await;
    let id = c
        .create_watcher(fspb::CreateWatcherRequest { path: dir.str(), ..Default::default() })
        .await
        .expect("CreateWatcher")
        .into_inner()
        .watcher_id;
    for i in 0..40 {
        touch(&dir.join(format!("f{i:02}")));
    }
    // Let the daemon read them all.
    tokio::time::sleep(SHORT).await;
    let first = c
        .get_watcher_events(fspb::GetWatcherEventsRequest { watcher_id: id.clone() })
        .await
        .expect("the events before the loss")
        .into_inner()
        .events;
    assert_eq!(first.len(), 16, "{first:?}");
    assert_eq!(first[0].name, "f00");
    for _ in 0..2 {
        let st =
            c.get_watcher_events(fspb::GetWatcherEventsRequest { watcher_id: id.clone() }).await.expect_err("loss");
        assert_eq!(code(&st), "data_loss", "{st:?}");
        assert!(st.message().contains("24 events were lost"), "{st:?}");
    }
    c.remove_watcher(fspb::RemoveWatcherRequest { watcher_id: id.clone() }).await.expect("RemoveWatcher");
    let st = c.get_watcher_events(fspb::GetWatcherEventsRequest { watcher_id: id }).await.expect_err("removed");
    assert_eq!(code(&st), "not_found");
}

/// The polling form, over Connect JSON as the e2b SDKs call it.
#[tokio::test]
async fn polling_trio_over_connect_json() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-poll");
    let (status, body) =
        envd.unary("/filesystem.Filesystem/CreateWatcher", &json!({"path": dir.str(), "recursive": true})).await;
    assert_eq!(status, 200, "{body}");
    let id = body["watcherId"].as_str().expect("watcherId").to_string();

    fs::create_dir(dir.join("d")).expect("mkdir");
    fs::write(dir.join("d/f"), b"x").expect("write");
    let mut seen: Vec<(String, String)> = vec![];
    let deadline = Instant::now() + STEP;
    while !seen.iter().any(|(n, t)| n == "d/f" && t == "EVENT_TYPE_CREATE") {
        assert!(Instant::now() < deadline, "d/f never reported: {seen:?}");
        let (status, body) = envd.unary("/filesystem.Filesystem/GetWatcherEvents", &json!({"watcherId": id})).await;
        assert_eq!(status, 200, "{body}");
        for e in body["events"].as_array().cloned().unwrap_or_default() {
            seen.push((e["name"].as_str().unwrap_or("").into(), e["type"].as_str().unwrap_or("").into()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen.contains(&("d".into(), "EVENT_TYPE_CREATE".into())), "{seen:?}");
    // Each call answers only what is new.
    let (_, body) = envd.unary("/filesystem.Filesystem/GetWatcherEvents", &json!({"watcherId": id})).await;
    assert!(body["events"].as_array().is_none_or(|a| a.is_empty()), "nothing new: {body}");

    let (status, _) = envd.unary("/filesystem.Filesystem/RemoveWatcher", &json!({"watcherId": id})).await;
    assert_eq!(status, 200);
    let (status, body) = envd.unary("/filesystem.Filesystem/GetWatcherEvents", &json!({"watcherId": id})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let (status, body) = envd.unary("/filesystem.Filesystem/RemoveWatcher", &json!({"watcherId": id})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
}

/// A polled watcher nobody calls is removed after `--watcher-idle-seconds`, and its slot freed;
/// each call keeps it alive.
#[tokio::test]
async fn idle_polled_watchers_are_removed() {
    let envd = Envd::start(&["--watcher-idle-seconds", "1", "--max-watches", "1"]);
    let dir = Scratch::new("watch-idle");
    let mut c = envd.filesystem().await;
    let create = || fspb::CreateWatcherRequest { path: dir.str(), ..Default::default() };
    let id = c.create_watcher(create()).await.expect("CreateWatcher").into_inner().watcher_id;
    let st = c.create_watcher(create()).await.expect_err("the one slot is taken");
    assert_eq!(code(&st), "resource_exhausted");

    // Polled every 600 ms for 2.4 s: it stays.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        c.get_watcher_events(fspb::GetWatcherEventsRequest { watcher_id: id.clone() }).await.expect("still there");
    }
    // Left alone for 2 s: gone, and its slot with it.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let st = c.get_watcher_events(fspb::GetWatcherEventsRequest { watcher_id: id }).await.expect_err("expired");
    assert_eq!(code(&st), "not_found", "{st:?}");
    c.create_watcher(create()).await.expect("the slot is free again");
}

/// 64 directory watches by default; the 65th is refused with resource_exhausted, whichever form
/// it takes, until one ends.
#[tokio::test]
async fn the_65th_watch_is_refused_until_one_ends() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-limit");
    let log = dir.join("log");
    touch(&log);
    let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    assert_eq!(info.limits.expect("limits").max_watches, 64);

    let channel = envd.channel().await;
    let mut fs_client = fspb::filesystem_client::FilesystemClient::new(channel.clone());
    let mut files = ext::files_client::FilesClient::new(channel.clone());
    let mut e2b = Vec::new();
    for _ in 0..30 {
        e2b.push(E2bWatch::open(&mut fs_client, watch_req(dir.path(), true, false)).await.expect("E2B watch"));
    }
    let mut hangar = Vec::new();
    for _ in 0..32 {
        hangar.push(HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.expect("hangar watch"));
    }
    let mut polled = Vec::new();
    for _ in 0..2 {
        let r = fspb::CreateWatcherRequest { path: dir.str(), ..Default::default() };
        polled.push(fs_client.create_watcher(r).await.expect("CreateWatcher").into_inner().watcher_id);
    }

    let st = E2bWatch::open(&mut fs_client, watch_req(dir.path(), false, false)).await.err().expect("65th");
    assert_eq!(code(&st), "resource_exhausted", "{st:?}");
    assert!(st.message().contains("64"), "{st:?}");
    let st = HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.err().expect("65th");
    assert_eq!(code(&st), "resource_exhausted", "{st:?}");
    let st = fs_client
        .create_watcher(fspb::CreateWatcherRequest { path: dir.str(), ..Default::default() })
        .await
        .expect_err("65th");
    assert_eq!(code(&st), "resource_exhausted", "{st:?}");
    // Follows have slots of their own (follow.rs).
    FollowLog::open(&mut files, follow_req(&log, None)).await.expect("a follow beside 64 watches");
    let (status, body) = envd.unary("/filesystem.Filesystem/CreateWatcher", &json!({"path": dir.str()})).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("resource_exhausted")), "{body}");

    // All 64 work.
    touch(&dir.join("seen-by-all"));
    for w in e2b.iter_mut() {
        w.until(STEP, "create seen-by-all", |s| has(s, "seen-by-all", "create")).await;
    }

    // A stream that ends frees its slot (once the daemon sees the client go).
    drop(e2b.pop());
    let deadline = Instant::now() + STEP;
    let again = loop {
        match HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await {
            Ok(w) => break w,
            Err(st) if code(&st) == "resource_exhausted" && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(st) => panic!("the dropped stream's slot was not freed: {st:?}"),
        }
    };
    hangar.push(again);
    // A removed watcher frees its slot at once.
    fs_client
        .remove_watcher(fspb::RemoveWatcherRequest { watcher_id: polled.pop().expect("one") })
        .await
        .expect("RemoveWatcher");
    fs_client
        .create_watcher(fspb::CreateWatcherRequest { path: dir.str(), ..Default::default() })
        .await
        .expect("the removed watcher's slot");
}

#[tokio::test]
async fn max_watches_from_flag_and_environment() {
    let envd = Envd::builder().env("HANGAR_ENVD_MAX_WATCHES", "2").env("HANGAR_ENVD_WATCHER_IDLE_SECONDS", "7").start();
    let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    let limits = info.limits.expect("limits");
    assert_eq!((limits.max_watches, limits.watcher_idle_seconds, limits.watch_queue_events), (2, 7, 1024));
    for cap in ["files.watch", "files.follow"] {
        assert!(info.capabilities.iter().any(|c| c == cap), "{cap} in {:?}", info.capabilities);
    }
    let dir = Scratch::new("watch-max");
    let mut files = envd.files().await;
    let _a = HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.expect("1");
    let _b = HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.expect("2");
    let st = HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.err().expect("3rd");
    assert_eq!(code(&st), "resource_exhausted");

    let envd = Envd::start(&["--max-watches", "5", "--watch-queue-events", "99"]);
    let limits =
        envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner().limits.expect("limits");
    assert_eq!((limits.max_watches, limits.watch_queue_events, limits.watcher_idle_seconds), (5, 99, 60));
}

#[tokio::test]
async fn keepalives_and_deadline_on_watch_streams() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-keepalive");
    let req = || with_meta(tonic::Request::new(watch_req(dir.path(), false, false)), "keepalive-ping-interval", "1");
    let mut e2b = E2bWatch::open_req(&mut envd.filesystem().await, req()).await.expect("watch");
    let mut hangar = HangarWatch::open_req(&mut envd.files().await, req()).await.expect("watch");
    e2b.drain_for(Duration::from_millis(2500)).await;
    assert!(e2b.keepalives >= 1, "a keepalive after 1 s of silence");
    touch(&dir.join("x"));
    hangar
        .until(Duration::from_secs(3), "a keepalive after create x", |e| {
            e.iter().skip_while(|x| !matches!(x, HangarEv::Fs { .. })).any(|x| matches!(x, HangarEv::KeepAlive { .. }))
        })
        .await;
    let ka = hangar.events.iter().rev().find(|x| matches!(x, HangarEv::KeepAlive { .. })).expect("keepalive");
    assert_eq!(ka, &HangarEv::KeepAlive { seq: 1 }, "a keepalive carries the last event's seq");

    // The deadline ends the stream and frees the slot.
    let envd = Envd::start(&["--max-watches", "1"]);
    let mut c = envd.filesystem().await;
    let started = Instant::now();
    let mut w = E2bWatch::open_req(
        &mut c,
        with_meta(tonic::Request::new(watch_req(dir.path(), false, false)), "grpc-timeout", "500m"),
    )
    .await
    .expect("watch");
    let end = w.to_end(STEP).await;
    let st = end.expect_err("deadline");
    assert!(matches!(code(&st), "deadline_exceeded" | "cancelled"), "{st:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let deadline = Instant::now() + STEP;
    loop {
        match E2bWatch::open(&mut c, watch_req(dir.path(), false, false)).await {
            Ok(_) => break,
            Err(st) if Instant::now() < deadline && code(&st) == "resource_exhausted" => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(st) => panic!("slot not freed after the deadline: {st:?}"),
        }
    }
}

/// E2B's stream over Connect JSON, as the async SDK reads it.
#[tokio::test]
async fn e2b_watch_over_connect_json() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("watch-json");
    let mut s = envd
        .open_stream(
            "/filesystem.Filesystem/WatchDir",
            &json!({"path": dir.str(), "recursive": true, "includeEntry": true}),
            &[("connect-timeout-ms", "5000")],
        )
        .await;
    assert_eq!(s.status, 200);
    let first = s.next_within(STEP).await.expect("envelope").expect("start");
    assert_eq!(first.json(), json!({"start": {}}));
    fs::write(dir.join("j.txt"), b"abc").expect("write");
    let ev = loop {
        let e = s.next_within(STEP).await.expect("envelope").expect("an event");
        assert!(!e.is_end(), "ended early: {:?}", e.json());
        let v = e.json();
        if v.get("filesystem").is_some() {
            break v;
        }
    };
    assert_eq!(ev["filesystem"]["name"], "j.txt");
    assert_eq!(ev["filesystem"]["type"], "EVENT_TYPE_CREATE");
    assert_eq!(ev["filesystem"]["entry"]["type"], "FILE_TYPE_FILE");
    assert_eq!(ev["filesystem"]["entry"]["name"], "j.txt");
}

#[test]
fn bad_watch_flags_are_refused() {
    for args in [
        ["--max-watches", "0"],
        ["--watcher-idle-seconds", "0"],
        ["--watch-queue-events", "0"],
        ["--max-watches", "many"],
    ] {
        let mut child = std::process::Command::new(envd_bin())
            .args(["--listen", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run hangar-envd");
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} was accepted: the daemon kept running");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success(), "{args:?} must be refused");
    }
}
