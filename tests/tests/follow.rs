//! Log following (hangar's `Files/Follow`): what `tail -F` does, from outside the daemon.

use std::{
    fs::{self, OpenOptions},
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use hangar_e2e::{watch::*, *};
use serde_json::json;

fn append(p: &Path, data: &[u8]) {
    let mut f =
        OpenOptions::new().append(true).create(true).open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    f.write_all(data).expect("append");
}

fn code(st: &tonic::Status) -> &'static str {
    code_name(st.code())
}

/// Total bytes received in data events.
fn received(l: &FollowLog) -> usize {
    l.events.iter().map(|e| if let FollowEv::Data(d) = e { d.data.len() } else { 0 }).sum()
}

#[tokio::test]
async fn follow_from_the_end_streams_appended_bytes() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-end");
    let log = dir.join("app.log");
    fs::write(&log, b"old line\n").expect("write");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, None)).await.expect("Follow");
    assert_eq!(f.start.path, log.to_string_lossy());
    assert!(f.start.exists);
    assert_eq!((f.start.offset, f.start.size), (9, 9), "from the end: {:?}", f.start);

    for (i, line) in ["one\n", "two\n", "three\n"].iter().enumerate() {
        append(&log, line.as_bytes());
        f.until(STEP, &format!("line {i}"), |l| l.current().ends_with(line.as_bytes())).await;
    }
    assert_eq!(f.generations(), vec![b"one\ntwo\nthree\n".to_vec()]);
    match &f.events[0] {
        FollowEv::Data(d) => assert_eq!(d.offset, 9),
        other => panic!("first event {other:?}"),
    }
}

#[tokio::test]
async fn follow_from_an_explicit_offset() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-offset");
    let log = dir.join("f");
    fs::write(&log, b"0123456789").expect("write");
    let mut files = envd.files().await;

    let mut f = FollowLog::open(&mut files, follow_req(&log, Some(3))).await.expect("Follow");
    assert_eq!((f.start.offset, f.start.size), (3, 10));
    f.until(STEP, "3456789", |l| l.current() == b"3456789").await;
    append(&log, b"ab");
    f.until(STEP, "ab", |l| l.current() == b"3456789ab").await;

    let mut f = FollowLog::open(&mut files, follow_req(&log, Some(0))).await.expect("Follow");
    f.until(STEP, "everything", |l| l.current() == b"0123456789ab").await;

    // Past the end: the file is shorter than what the client had read, so it starts over.
    let mut f = FollowLog::open(&mut files, follow_req(&log, Some(100))).await.expect("Follow");
    assert_eq!((f.start.offset, f.start.size), (100, 12));
    f.until(STEP, "truncated, then everything", |l| l.current() == b"0123456789ab").await;
    assert!(
        matches!(&f.events[0], FollowEv::Truncated(t) if t.previous_offset == 100 && t.size == 12),
        "{:?}",
        f.short()
    );
}

#[tokio::test]
async fn follow_through_truncation() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-trunc");
    let log = dir.join("f");
    fs::write(&log, b"hello world").expect("write");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, Some(0))).await.expect("Follow");
    f.until(STEP, "hello world", |l| l.current() == b"hello world").await;

    // truncate(2), then new bytes from 0.
    OpenOptions::new().write(true).open(&log).expect("open").set_len(0).expect("truncate");
    f.until(STEP, "truncated", |l| l.saw("truncated")).await;
    append(&log, b"new");
    f.until(STEP, "new", |l| l.current() == b"new").await;

    // Rewritten shorter with O_TRUNC, as `>` in a shell does.
    fs::write(&log, b"ab").expect("rewrite");
    f.until(STEP, "ab after a second truncation", |l| l.generations().len() == 3 && l.current() == b"ab").await;
    assert_eq!(f.generations(), vec![b"hello world".to_vec(), b"new".to_vec(), b"ab".to_vec()]);
}

/// logrotate's way: rename the file away, create a new one at the path. Every byte written to the
/// old file before the switch is delivered, then the new file from 0.
#[tokio::test]
async fn follow_through_rename_and_recreate() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-rotate");
    let log = dir.join("app.log");
    fs::write(&log, b"one\n").expect("write");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, Some(0))).await.expect("Follow");
    f.until(STEP, "one", |l| l.current() == b"one\n").await;

    for round in 0..3 {
        append(&log, format!("last words {round}\n").as_bytes());
        fs::rename(&log, dir.join(format!("app.log.{round}"))).expect("rotate");
        fs::write(&log, format!("first words {round}\n")).expect("new file");
        let want = format!("first words {round}\n");
        f.until(STEP, &want, |l| l.current() == want.as_bytes()).await;
    }
    let gens = f.generations();
    assert_eq!(gens[0], b"one\nlast words 0\n");
    assert_eq!(gens[1], b"first words 0\nlast words 1\n");
    assert_eq!(gens[2], b"first words 1\nlast words 2\n");
    assert_eq!(gens[3], b"first words 2\n");
    assert_eq!(gens.len(), 4, "{:?}", f.short());
    // The daemon may see each switch as a replacement, or as a removal then a creation.
    assert!(f.saw("replaced") || (f.saw("removed") && f.saw("created")), "{:?}", f.short());
}

#[tokio::test]
async fn follow_through_delete_and_recreate() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-delete");
    let log = dir.join("f");
    fs::write(&log, b"abc").expect("write");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, Some(0))).await.expect("Follow");
    f.until(STEP, "abc", |l| l.current() == b"abc").await;
    fs::remove_file(&log).expect("rm");
    f.until(STEP, "removed", |l| l.saw("removed")).await;
    assert!(matches!(f.events.last(), Some(FollowEv::Removed(r)) if r.previous_offset == 3), "{:?}", f.short());
    fs::write(&log, b"again").expect("recreate");
    f.until(STEP, "again", |l| l.saw("created") && l.current() == b"again").await;
    append(&log, b"+more");
    f.until(STEP, "+more", |l| l.current() == b"again+more").await;
    assert_eq!(f.generations(), vec![b"abc".to_vec(), b"again+more".to_vec()]);
}

#[tokio::test]
async fn follow_a_file_that_does_not_exist_yet() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-later");
    let mut files = envd.files().await;

    let log = dir.join("later.log");
    let mut f = FollowLog::open(&mut files, follow_req(&log, Some(5))).await.expect("Follow");
    assert!(!f.start.exists);
    assert_eq!((f.start.offset, f.start.size), (0, 0));
    fs::write(&log, b"hi").expect("create");
    f.until(STEP, "created, hi", |l| l.saw("created") && l.current() == b"hi").await;
    assert!(matches!(f.events[0], FollowEv::Created(_)), "{:?}", f.short());

    // In directories that do not exist yet either.
    let deep = dir.join("a/b/c/deep.log");
    let mut f = FollowLog::open(&mut files, follow_req(&deep, None)).await.expect("Follow");
    assert!(!f.start.exists);
    fs::create_dir(dir.join("a")).expect("mkdir a");
    fs::create_dir_all(dir.join("a/b/c")).expect("mkdir -p");
    fs::write(&deep, b"deep").expect("create");
    f.until(STEP, "deep", |l| l.current() == b"deep").await;

    // Its directory removed and made again.
    fs::remove_dir_all(dir.join("a")).expect("rm -rf");
    f.until(STEP, "removed", |l| l.saw("removed")).await;
    fs::create_dir_all(dir.join("a/b/c")).expect("mkdir -p");
    fs::write(&deep, b"back").expect("create");
    f.until(STEP, "back", |l| l.current() == b"back").await;
    assert_eq!(f.generations(), vec![Vec::new(), b"deep".to_vec(), b"back".to_vec()]);
}

/// Many writes, large and small, while following: every byte once, in order, with its offset,
/// in chunks of at most 64 KiB.
#[tokio::test]
async fn every_byte_once_under_a_stream_of_writes() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-stream");
    let log = dir.join("f");
    fs::write(&log, b"").expect("create");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, None)).await.expect("Follow");
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut want = Vec::new();
            let mut file = OpenOptions::new().append(true).open(&log).expect("open");
            for i in 0..3000 {
                let line = format!("line {i} {}\n", "x".repeat(i % 50));
                file.write_all(line.as_bytes()).expect("write");
                want.extend_from_slice(line.as_bytes());
            }
            let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            file.write_all(&big).expect("write big");
            want.extend_from_slice(&big);
            want
        })
    };
    let want = writer.join().expect("writer");
    f.until(Duration::from_secs(30), "every byte", |l| received(l) >= want.len()).await;
    f.drain_for(Duration::from_millis(200)).await;
    assert_eq!(f.generations(), vec![want]);
    assert!(f.events.iter().any(|e| matches!(e, FollowEv::Data(d) if d.data.len() == 64 * 1024)), "64 KiB chunks");
}

/// Writes reach the client without waiting for any polling interval: the median of 20 writes is
/// under 100 ms (a poll would put it near half its interval). The slowest is printed, not bound: on
/// two busy cores one write can wait half a second for the CPU (bench/ measures the latency).
#[tokio::test]
async fn writes_are_delivered_promptly() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-latency");
    let log = dir.join("f");
    fs::write(&log, b"").expect("create");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, None)).await.expect("Follow");
    let mut file = OpenOptions::new().append(true).open(&log).expect("open");
    let mut lat = Vec::new();
    for i in 0..20 {
        let line = format!("{i}\n");
        let t = Instant::now();
        file.write_all(line.as_bytes()).expect("write");
        let n = f.events.len();
        f.until(STEP, "the write", |l| l.events.len() > n).await;
        lat.push(f.arrived[n].duration_since(t));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    lat.sort();
    eprintln!("follow delivery latency: min {:?} median {:?} max {:?}", lat[0], lat[lat.len() / 2], lat[lat.len() - 1]);
    assert!(lat[lat.len() / 2] < Duration::from_millis(100), "median {:?}: {lat:?}", lat[lat.len() / 2]);
}

#[tokio::test]
async fn follow_errors() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-errors");
    let mut files = envd.files().await;
    let st = FollowLog::open(&mut files, follow_req(dir.path(), None)).await.err().expect("a directory");
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
    let st = FollowLog::open(&mut files, follow_req(Path::new(""), None)).await.err().expect("no path");
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
    let fifo = dir.join("fifo");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let st = FollowLog::open(&mut files, follow_req(&fifo, None)).await.err().expect("a FIFO");
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
}

/// The inotify instances a process holds, and the watches in them (each is a line of the
/// instance's fdinfo).
fn inotify_use(pid: u32) -> (usize, usize) {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).expect("the daemon's fds");
    let inotify: Vec<String> = fds
        .filter_map(|e| e.ok())
        .filter(|e| fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let watches = inotify
        .iter()
        .map(|fd| fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default())
        .map(|info| info.lines().filter(|l| l.starts_with("inotify wd:")).count())
        .sum();
    (inotify.len(), watches)
}

/// Follows share the daemon's one inotify instance: 150 follows of files in one directory (more
/// than `--max-watches`, and more than the 128 instances the kernel allows a user by default)
/// hold one instance between them, each still reads its own file, and follows that end leave
/// the directory's watch to the rest.
#[tokio::test]
async fn follows_share_one_inotify_instance() {
    let envd = Envd::start(&["--max-watches", "2"]);
    let dir = Scratch::new("follow-shared");
    let mut follows = Vec::new();
    for batch in 0..3 {
        // A connection of its own for each 50: a server's streams per connection are bounded.
        let mut files = envd.files().await;
        for i in 0..50 {
            let p = dir.join(format!("{}.log", batch * 50 + i));
            fs::write(&p, b"").expect("write");
            follows.push(FollowLog::open(&mut files, follow_req(&p, Some(0))).await.expect("Follow"));
        }
    }
    // One directory and 150 files.
    assert_eq!(inotify_use(envd.pid()), (1, 151), "150 follows");

    // Every other follow ends: their files' watches go, the directory's stays.
    let mut kept: Vec<(usize, FollowLog)> = follows.into_iter().enumerate().filter(|(i, _)| i % 2 == 0).collect();
    let deadline = Instant::now() + STEP;
    while inotify_use(envd.pid()) != (1, 76) {
        assert!(Instant::now() < deadline, "75 follows ended, yet {:?}", inotify_use(envd.pid()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The rest still see their files' writes, and a rotation, which only the directory's shared
    // watch shows.
    for (i, f) in kept.iter_mut() {
        let p = dir.join(format!("{i}.log"));
        let line = format!("line of {i}\n");
        append(&p, line.as_bytes());
        f.until(STEP, &line, |l| l.current() == line.as_bytes()).await;
    }
    let (i, f) = &mut kept[0];
    let p = dir.join(format!("{i}.log"));
    fs::rename(&p, dir.join("rotated")).expect("rotate");
    fs::write(&p, b"new file\n").expect("new file");
    f.until(STEP, "the new file", |l| l.current() == b"new file\n").await;
}

/// Follows have a bound of their own (`--max-follows`), apart from directory watches'.
#[tokio::test]
async fn follows_past_max_follows_are_refused_until_one_ends() {
    let envd = Envd::start(&["--max-follows", "2", "--max-watches", "1"]);
    let info = envd.daemon().await.info(ext::InfoRequest {}).await.expect("Info").into_inner();
    let limits = info.limits.expect("limits");
    assert_eq!((limits.max_follows, limits.max_watches), (2, 1));
    let dir = Scratch::new("follow-bound");
    let log = dir.join("app.log");
    fs::write(&log, b"").expect("write");
    let mut files = envd.files().await;
    let _watch = HangarWatch::open(&mut files, watch_req(dir.path(), false, false)).await.expect("the one watch");
    let mut follows = Vec::new();
    for _ in 0..2 {
        follows.push(FollowLog::open(&mut files, follow_req(&log, None)).await.expect("Follow beside a full watch"));
    }
    let st = FollowLog::open(&mut files, follow_req(&log, None)).await.err().expect("the third");
    assert_eq!(code(&st), "resource_exhausted", "{st:?}");
    assert!(st.message().contains("at most 2 follows"), "{st:?}");
    drop(follows.pop());
    let deadline = Instant::now() + STEP;
    loop {
        match FollowLog::open(&mut files, follow_req(&log, None)).await {
            Ok(_) => break,
            Err(st) if code(&st) == "resource_exhausted" && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(st) => panic!("the ended follow's slot was not freed: {st:?}"),
        }
    }
}

#[tokio::test]
async fn follow_keepalives_and_deadline() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-keepalive");
    let log = dir.join("f");
    fs::write(&log, b"").expect("create");
    let mut files = envd.files().await;
    let req = with_meta(tonic::Request::new(follow_req(&log, None)), "keepalive-ping-interval", "1");
    let mut f = FollowLog::open_req(&mut files, req).await.expect("Follow");
    f.drain_for(Duration::from_millis(2500)).await;
    assert!(f.keepalives >= 1, "a keepalive after 1 s of silence");

    let req = with_meta(tonic::Request::new(follow_req(&log, None)), "grpc-timeout", "300m");
    let mut f = FollowLog::open_req(&mut files, req).await.expect("Follow");
    f.drain_for(Duration::from_secs(3)).await;
    let st = f.ended.clone().expect("ended").expect_err("deadline");
    assert!(matches!(code(&st), "deadline_exceeded" | "cancelled"), "{st:?}");
}

/// Over Connect JSON: bytes as base64, 64-bit offsets as strings.
#[tokio::test]
async fn follow_over_connect_json() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-json");
    let log = dir.join("f");
    fs::write(&log, b"abc").expect("write");
    let mut s = envd
        .open_stream(
            "/hangar.envd.v1.Files/Follow",
            &json!({"path": log.to_string_lossy(), "offset": "1"}),
            &[("connect-timeout-ms", "5000")],
        )
        .await;
    assert_eq!(s.status, 200);
    let start = s.next_within(STEP).await.expect("envelope").expect("start").json();
    assert_eq!(start["event"]["start"]["offset"], "1", "{start}");
    assert_eq!(start["event"]["start"]["size"], "3", "{start}");
    assert_eq!(start["event"]["start"]["exists"], true, "{start}");
    let data = s.next_within(STEP).await.expect("envelope").expect("data").json();
    assert_eq!(data["event"]["data"]["offset"], "1", "{data}");
    assert_eq!(unb64(data["event"]["data"]["data"].as_str().expect("base64")), b"bc");
}

/// An overlay mount, as a container's root filesystem is, unmounted on drop.
struct Overlay {
    dir: Scratch,
}

impl Overlay {
    /// `None` where mounting is not allowed (not root, or no CAP_SYS_ADMIN in a container).
    fn mount(lower_files: &[(&str, &[u8])]) -> Option<Overlay> {
        if !is_root() {
            return None;
        }
        let dir = Scratch::new("overlay");
        for d in ["lower", "upper", "work", "merged"] {
            fs::create_dir(dir.join(d)).expect("mkdir");
        }
        for (name, data) in lower_files {
            fs::write(dir.join("lower").join(name), data).expect("write lower");
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            dir.join("lower").display(),
            dir.join("upper").display(),
            dir.join("work").display()
        );
        let ok = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(dir.join("merged"))
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Overlay { dir })
    }

    fn merged(&self, rel: &str) -> std::path::PathBuf {
        self.dir.join("merged").join(rel)
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.join("merged")).status();
    }
}

/// On overlayfs (a container's root filesystem): a file from the lower layer is copied up by
/// its first write, and following it goes on seamlessly, with every byte once. The daemon has no
/// polling interval, so the new line arrives only if the copy-up's write woke the follower. No
/// time is bound: the write includes the copy-up itself (about 1 ms here, 514 ms once on a CI
/// machine busy with its build); bench/ measures latency.
#[tokio::test]
async fn follow_on_overlayfs_through_copy_up() {
    let ovl = Overlay::mount(&[("lower.log", b"from the image\n")]);
    if skip_without(ovl.is_some(), "an overlayfs mount") {
        return;
    }
    let Some(ovl) = ovl else { return };
    let envd = Envd::start(&[]);
    let log = ovl.merged("lower.log");
    let mut f = FollowLog::open(&mut envd.files().await, follow_req(&log, Some(0))).await.expect("Follow");
    f.until(STEP, "the image's line", |l| l.current() == b"from the image\n").await;
    append(&log, b"written in the container\n");
    f.until(STEP, "the new line", |l| l.current().ends_with(b"written in the container\n")).await;
    append(&log, b"again\n");
    f.until(STEP, "again", |l| l.current().ends_with(b"again\n")).await;
    assert_eq!(f.generations(), vec![b"from the image\nwritten in the container\nagain\n".to_vec()], "{:?}", f.short());

    // A file created in the container, and a watch on the merged directory.
    let mut w =
        E2bWatch::open(&mut envd.filesystem().await, watch_req(&ovl.merged(""), true, false)).await.expect("watch");
    let new = ovl.merged("new.log");
    let mut g = FollowLog::open(&mut envd.files().await, follow_req(&new, None)).await.expect("Follow");
    fs::write(&new, b"fresh\n").expect("write");
    g.until(STEP, "fresh", |l| l.current() == b"fresh\n").await;
    append(&log, b"third\n");
    w.until(STEP, "create new.log, write lower.log", |s| has(s, "new.log", "create") && has(s, "lower.log", "write"))
        .await;
}

/// A follow reads, and a watch lists, only what the calling user may: acting as `nobody`, a
/// root-only file cannot be followed nor a root-only directory watched.
#[tokio::test]
async fn follows_and_watches_act_as_the_calling_user() {
    assert!(is_root(), "the daemon must run as root to act as other users (CI runs as root)");
    use std::os::unix::fs::PermissionsExt;
    let envd = Envd::start(&[]);
    let dir = Scratch::new("follow-as-user");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.join("secret.log");
    std::fs::write(&secret, b"root only\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.join("open.log");
    std::fs::write(&open, b"").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let private = dir.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();

    fn as_nobody<T>(mut r: tonic::Request<T>) -> tonic::Request<T> {
        r.metadata_mut().insert("authorization", basic_user("nobody").parse().unwrap());
        r
    }
    let mut files = envd.files().await;
    let st = FollowLog::open_req(&mut files, as_nobody(tonic::Request::new(follow_req(&secret, Some(0)))))
        .await
        .err()
        .expect("nobody may not read a 0600 root file");
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    let mut log = FollowLog::open_req(&mut files, as_nobody(tonic::Request::new(follow_req(&open, Some(0)))))
        .await
        .expect("a readable file follows");
    append(&open, b"visible\n");
    log.until(STEP, "the appended line", |l| received(l) >= 8).await;

    let mut fs = envd.filesystem().await;
    let st = E2bWatch::open_req(&mut fs, as_nobody(tonic::Request::new(watch_req(&private, false, false))))
        .await
        .err()
        .expect("nobody may not watch a 0700 root directory");
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    // As root (the daemon's own user) both work.
    FollowLog::open(&mut files, follow_req(&secret, Some(0))).await.expect("root follows");
}
