//! A local sandbox's files (its work directory and home) are a filesystem of its own (`disk_mib`), loop-mounted on the
//! host: filling it fails the writer and no one else, destroying the sandbox leaves no mount, and
//! a relay restart or a host reboot keeps it. Read from `/proc/self/mountinfo` and the host's
//! files, as root (where sandboxes are isolated); the option's refusals run everywhere.
use std::{os::unix::fs::MetadataExt as _, path::PathBuf};

use hangar_e2e::{is_root, mount_points_under, relay::*, skip_without, wait_until, STEP};
use serde_json::{json, Value};

async fn exec(relay: &Relay, sandbox: &str, command: &str) -> Value {
    let r = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(json!({"command": command})))
        .await;
    assert_eq!(r.status, 200, "exec in {sandbox} {command:?}: {r:?}");
    r.json()
}

async fn create(relay: &Relay, name: &str, options: Value) -> Value {
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": name, "options": options}))).await;
    assert_eq!(r.status, 201, "creating {name}: {r:?}");
    r.json()
}

fn sandbox_dir(state: &StateDir, sandbox: &Value) -> PathBuf {
    state.0.join("sandboxes").join(sandbox["id"].as_str().expect("an id"))
}

/// Writes 100 MiB into a 64 MiB sandbox; prints `dd=` and its exit status after its messages.
const FILL: &str = "dd if=/dev/zero of=big bs=1M count=100 2>&1; echo dd=$?";

/// A sandbox that fills its 64 MiB gets ENOSPC itself; the relay answers everyone else as
/// before (sandboxes, tokens, another sandbox's exec), and the sandbox cost the state
/// directory's filesystem its image, no more. (Before, the work directory was a directory of
/// the state directory's filesystem: the 100 MiB landed there and dd succeeded.)
#[tokio::test]
async fn a_full_work_directory_fails_its_writer_and_no_one_else() {
    if skip_without(is_root(), "root (isolated local sandboxes with filesystems of their own)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let small = create(&relay, "small", json!({"disk_mib": 64})).await;
    assert_eq!(small["options"], json!({"disk_mib": 64}), "{small}");
    create(&relay, "other", json!({})).await;

    let v = exec(&relay, "small", FILL).await;
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("No space left on device") && !out.contains("dd=0"), "dd must fail for want of space: {v}");

    // With the sandbox's disk full, everyone else is answered.
    assert_eq!(relay.call("GET", "/api/sandboxes", Some(ADMIN), None).await.status, 200);
    relay.token("during", "user").await;
    let v = exec(&relay, "other", "echo written > f && cat f").await;
    assert_eq!(v["stdout"], json!("written\n"), "another sandbox writes: {v}");
    let v = exec(&relay, "small", "echo still answers").await;
    assert_eq!(v["stdout"], json!("still answers\n"), "the full sandbox's daemon answers: {v}");

    // What it wrote is in its image, on the host no bigger than the sandbox's size.
    let dir = sandbox_dir(&state, &small);
    let big = std::fs::metadata(dir.join("disk/work/big")).expect("the sandbox's file, seen from the host");
    assert_ne!(big.dev(), std::fs::metadata(&state.0).expect("state").dev(), "big is not on the state filesystem");
    let image = std::fs::metadata(dir.join("work.img")).expect("the sandbox's image");
    assert_eq!(image.len(), 64 << 20, "the image is the sandbox's size");
    // Its blocks were reserved when it was made: the host gives none of them to anyone else.
    let held = image.blocks() * 512;
    // Its size, and the host filesystem's few blocks that map it.
    assert!((64 << 20..=65 << 20).contains(&held), "the image holds {held} bytes on the host, not its size");
}

/// Destroy unmounts the sandbox's filesystem and removes its image: nothing is left mounted,
/// on the host or in another sandbox's mount namespace (which copied the mount when it
/// started), and its loop device is let go.
#[tokio::test]
async fn destroy_leaves_no_mount_and_no_image() {
    if skip_without(is_root(), "root (isolated local sandboxes with filesystems of their own)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let gone = create(&relay, "gone", json!({"disk_mib": 64})).await;
    let dir = sandbox_dir(&state, &gone);
    let image = dir.join("work.img");
    assert_eq!(mount_points_under(&dir), vec![dir.join("disk")], "its files are a mount point");
    exec(&relay, "gone", "echo x > f").await;
    // Started after `gone`, so its namespace holds a copy of `gone`'s mount.
    let later = create(&relay, "later", json!({})).await;
    let later_ns = format!("/proc/{}/mountinfo", state.daemon_of(later["id"].as_str().expect("id")));
    let id = gone["id"].as_str().expect("id");
    assert!(std::fs::read_to_string(&later_ns).unwrap_or_default().contains(id), "the copy this test is about");

    let r = relay.call("DELETE", "/api/sandboxes/gone", Some(ADMIN), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(mount_points_under(&dir), Vec::<PathBuf>::new(), "no mount left on the host");
    assert!(!image.exists() && !dir.exists(), "its image and directory are gone");
    let ns = std::fs::read_to_string(&later_ns).expect("the later sandbox's mountinfo");
    assert!(!ns.contains(id), "no mount of it left in another sandbox's namespace: {ns}");
    wait_until(STEP, "its loop device is let go", || !loop_backing_files().iter().any(|f| f.contains(id))).await;
    let v = exec(&relay, "later", "echo fine").await;
    assert_eq!(v["stdout"], json!("fine\n"), "{v}");
}

/// The files loop devices are backed by (`/sys/block/loop*/loop/backing_file`).
fn loop_backing_files() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    entries.flatten().filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok()).collect()
}

/// A relay killed and started again finds the sandbox's filesystem as it was; after a host
/// reboot (its daemon killed, its filesystem unmounted while the relay is down) the next start
/// of its daemon mounts it again first, files and bound intact.
#[tokio::test]
async fn a_restart_keeps_the_filesystem_and_a_reboot_mounts_it_again() {
    if skip_without(is_root(), "root (isolated local sandboxes with filesystems of their own)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let kept = create(&relay, "kept", json!({"disk_mib": 64})).await;
    let dir = sandbox_dir(&state, &kept);
    let disk = dir.join("disk");
    exec(&relay, "kept", "echo before > before.txt").await;

    drop(relay); // kill -9
    let relay = Relay::start(&state.0, &[]);
    let v = exec(&relay, "kept", "cat before.txt").await;
    assert_eq!(v["stdout"], json!("before\n"), "{v}");
    assert_eq!(mount_points_under(&dir), vec![disk.clone()], "still its own filesystem");

    // A reboot: the relay and the daemon die, the mount is gone.
    drop(relay);
    let daemon = state.daemon_of(kept["id"].as_str().expect("id"));
    // SAFETY: kill(2) on this test's sandbox's daemon.
    unsafe { libc::kill(daemon as i32, libc::SIGKILL) };
    wait_until(STEP, "the daemon is gone", || !std::path::Path::new(&format!("/proc/{daemon}")).exists()).await;
    let out = std::process::Command::new("umount").arg(&disk).output();
    assert!(out.as_ref().is_ok_and(|o| o.status.success()), "umount {}: {out:?}", disk.display());
    assert_eq!(mount_points_under(&dir), Vec::<PathBuf>::new());

    let relay = Relay::start(&state.0, &[]);
    let v = exec(&relay, "kept", &format!("cat before.txt; {FILL}")).await;
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with("before\n"), "the file written before the reboot is there: {v}");
    assert!(out.contains("No space left on device") && !out.contains("dd=0"), "and the bound holds: {v}");
    assert_eq!(mount_points_under(&dir), vec![disk], "mounted again");
    assert!(relay.log().contains("event=\"local_disk_remounted\""), "{}", relay.log());
}

/// `disk_mib` outside 64..=1048576, or of another type, is a 400 naming the range; a relay
/// that gives sandboxes no filesystem of their own (here: one that does not isolate) refuses
/// any `disk_mib` and shows `null` in the row. The relay-wide default is what a sandbox that
/// asks for none gets.
#[tokio::test]
async fn disk_mib_is_checked_and_shown() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_TEST_DISABLE_ISOLATION", "true")]);
    let r = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await;
    assert_eq!(r.json()["options"], json!({"disk_mib": null}), "{r:?}");
    let r = relay
        .call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "s", "options": {"disk_mib": 128}})))
        .await;
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(message.contains("disk_mib") && message.contains("not isolated"), "{message}");
    drop(relay);

    if skip_without(is_root(), "root (isolated local sandboxes with filesystems of their own)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_LOCAL_DISK_MIB", "96")]);
    let r = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await;
    assert_eq!(r.json()["options"], json!({"disk_mib": 96}), "the relay's default: {r:?}");
    for bad in [json!(63), json!(1048577), json!(-1), json!(100.5), json!("100")] {
        let body = json!({"name": "s", "options": {"disk_mib": bad}});
        let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{bad}: {r:?}");
        assert!(message.contains("64 to 1048576"), "{bad}: {message}");
    }
    // A size the host has no room for (1 TiB: more than the test machine's disk) is refused
    // at once, not found out later by a write.
    let body = json!({"name": "s", "options": {"disk_mib": 1048576}});
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (507, json!("resource_exhausted")), "{r:?}");
    assert!(message.contains("no room for the sandbox's 1048576 MiB"), "{message}");
    assert_eq!(relay.call("GET", "/api/sandboxes/s", Some(ADMIN), None).await.status, 404, "nothing was made");
    assert_eq!(
        std::fs::read_dir(state.0.join("sandboxes")).map(|d| d.count()).ok(),
        Some(1),
        "only default's directory"
    );
}
