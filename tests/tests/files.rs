//! E2B's `filesystem.Filesystem` unary RPCs and the `/files` routes: entry info, errors, acting
//! as the calling user, ranges, gzip, metadata, multipart, and a 1 GiB transfer in flat memory.

use std::{os::unix::fs::MetadataExt as _, time::Duration};

use hangar_e2e::{files::*, *};
use serde_json::json;

use fspb::{FileType, ListDirRequest, MakeDirRequest, MoveRequest, RemoveRequest, StatRequest};

fn code(st: &tonic::Status) -> &'static str {
    code_name(st.code())
}

fn stat_req(path: &str) -> StatRequest {
    StatRequest { path: path.to_string() }
}

// ---------------------------------------------------------------------------------------------
// Stat
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stat_describes_files_dirs_and_symlinks() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("stat");
    std::fs::write(dir.join("f.txt"), b"abc").unwrap();
    chmod(&dir.join("f.txt"), 0o640);
    std::fs::create_dir(dir.join("d")).unwrap();
    chmod(&dir.join("d"), 0o750);
    std::os::unix::fs::symlink(dir.join("f.txt"), dir.join("link")).unwrap();
    std::os::unix::fs::symlink(dir.join("gone"), dir.join("dangling")).unwrap();
    set_xattr(&dir.join("f.txt"), "user.e2b.author", b"mish");
    set_xattr(&dir.join("f.txt"), "user.other", b"not shown");
    let mut c = fs_client(&envd).await;

    let f = c.stat(stat_req(&dir.at("f.txt"))).await.expect("Stat file").into_inner().entry.expect("entry");
    assert_eq!(f.name, "f.txt");
    assert_eq!(f.r#type, FileType::File as i32);
    assert_eq!(f.path, dir.at("f.txt"));
    assert_eq!(f.size, 3);
    assert_eq!(f.mode, 0o640);
    assert_eq!(f.permissions, "-rw-r-----");
    assert_eq!(f.owner, my_name());
    assert!(!f.group.is_empty());
    assert_eq!(f.symlink_target, None);
    assert_eq!(f.metadata, [("author".to_string(), "mish".to_string())].into());
    let mtime = std::fs::metadata(dir.join("f.txt")).unwrap().mtime();
    assert_eq!(f.modified_time.expect("modified_time").seconds, mtime);

    let d = c.stat(stat_req(&dir.at("d"))).await.expect("Stat dir").into_inner().entry.unwrap();
    assert_eq!((d.r#type, d.mode, d.permissions.as_str()), (FileType::Directory as i32, 0o750, "drwxr-x---"));

    let l = c.stat(stat_req(&dir.at("link"))).await.expect("Stat symlink").into_inner().entry.unwrap();
    assert_eq!(l.r#type, FileType::Symlink as i32);
    assert_eq!(l.name, "link");
    assert_eq!(l.symlink_target.as_deref(), Some(dir.at("f.txt").as_str()));
    assert_eq!(l.permissions, "Lrwxrwxrwx");
    assert_eq!(l.mode, 0o640, "a symlink's mode is its target's, as in E2B");

    let dl = c.stat(stat_req(&dir.at("dangling"))).await.expect("Stat dangling symlink").into_inner().entry.unwrap();
    assert_eq!(dl.r#type, FileType::Symlink as i32);
    assert_eq!(dl.symlink_target.as_deref(), Some(dir.at("gone").as_str()));

    // `..` and `.` are cleaned out of the reply's path.
    let cleaned = format!("{}/d/./../f.txt", dir.path.display());
    let e = c.stat(stat_req(&cleaned)).await.expect("Stat with ..").into_inner().entry.unwrap();
    assert_eq!(e.path, dir.at("f.txt"));
}

#[tokio::test]
async fn stat_over_connect_json_uses_the_canonical_mapping() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("statjson");
    std::fs::write(dir.join("f"), b"12345").unwrap();
    let (status, body) = envd.unary("/filesystem.Filesystem/Stat", &json!({"path": dir.at("f")})).await;
    assert_eq!(status, 200, "{body}");
    let e = &body["entry"];
    assert_eq!(e["type"], "FILE_TYPE_FILE", "{body}");
    assert_eq!(e["size"], "5", "int64 as a string: {body}");
    assert_eq!(e["name"], "f");
    assert!(e["modifiedTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
    assert!(e["permissions"].as_str().is_some_and(|p| p.starts_with("-rw")), "{body}");

    let (status, body) = envd.unary("/filesystem.Filesystem/Stat", &json!({"path": dir.at("missing")})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
}

#[tokio::test]
async fn stat_errors_and_home_relative_paths() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("staterr");
    std::fs::write(dir.join("file"), b"x").unwrap();

    let st = c.stat(stat_req(&dir.at("missing"))).await.unwrap_err();
    assert_eq!(code(&st), "not_found", "{st:?}");
    assert!(st.message().contains(&dir.at("missing")), "the message names the path: {st:?}");
    let st = c.stat(stat_req(&dir.at("file/below"))).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "a file where a directory is wanted: {st:?}");
    let st = c.stat(stat_req("")).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "empty path: {st:?}");

    // `~`, `~/x` and relative paths are the acting user's home (root's here).
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let home = std::fs::canonicalize(&home).unwrap().to_string_lossy().into_owned();
    let e = c.stat(stat_req("~")).await.expect("Stat ~").into_inner().entry.unwrap();
    assert_eq!(e.path, home);
    let name = format!("hangar-e2e-home-{}", std::process::id());
    let in_home = std::path::Path::new(&home).join(&name);
    std::fs::write(&in_home, b"h").unwrap();
    let rel = c.stat(stat_req(&name)).await.map(|r| r.into_inner().entry.unwrap().path);
    let tilde = c.stat(stat_req(&format!("~/{name}"))).await.map(|r| r.into_inner().entry.unwrap().path);
    std::fs::remove_file(&in_home).unwrap();
    assert_eq!(rel.expect("relative Stat"), in_home.to_string_lossy());
    assert_eq!(tilde.expect("~/ Stat"), in_home.to_string_lossy());
}

// ---------------------------------------------------------------------------------------------
// MakeDir, Move, Remove
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn make_dir_creates_parents_and_refuses_existing() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("mkdir");

    let e = c
        .make_dir(MakeDirRequest { path: dir.at("a/b/c") })
        .await
        .expect("MakeDir with parents")
        .into_inner()
        .entry
        .unwrap();
    assert_eq!((e.name.as_str(), e.r#type, e.path.clone()), ("c", FileType::Directory as i32, dir.at("a/b/c")));
    assert!(dir.join("a/b/c").is_dir());
    assert_eq!(e.permissions, "drwxr-xr-x", "0755 under the usual umask");

    let st = c.make_dir(MakeDirRequest { path: dir.at("a/b/c") }).await.unwrap_err();
    assert_eq!(code(&st), "already_exists", "{st:?}");
    std::fs::write(dir.join("file"), b"x").unwrap();
    let st = c.make_dir(MakeDirRequest { path: dir.at("file") }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "a file in the way: {st:?}");
    let st = c.make_dir(MakeDirRequest { path: dir.at("file/sub") }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "a file as a parent: {st:?}");
    assert!(st.message().contains(&dir.at("file")), "names the file in the way: {st:?}");
    let st = c.make_dir(MakeDirRequest { path: String::new() }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "{st:?}");

    // Over Connect JSON, `already_exists` is HTTP 409.
    let (status, body) = envd.unary("/filesystem.Filesystem/MakeDir", &json!({"path": dir.at("a")})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_exists")), "{body}");
}

#[tokio::test]
async fn move_renames_and_creates_destination_parents() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("move");
    std::fs::write(dir.join("src.txt"), b"payload").unwrap();
    set_xattr(&dir.join("src.txt"), "user.e2b.stage", b"renamed");

    let e = c
        .r#move(MoveRequest { source: dir.at("src.txt"), destination: dir.at("new/deeper/dst.txt") })
        .await
        .expect("Move")
        .into_inner()
        .entry
        .unwrap();
    assert_eq!((e.name.as_str(), e.path.clone(), e.size), ("dst.txt", dir.at("new/deeper/dst.txt"), 7));
    assert_eq!(e.metadata.get("stage").map(String::as_str), Some("renamed"), "metadata moves with the file");
    assert!(!dir.join("src.txt").exists());
    assert_eq!(std::fs::read(dir.join("new/deeper/dst.txt")).unwrap(), b"payload");

    // A directory moves whole.
    std::fs::create_dir_all(dir.join("tree/sub")).unwrap();
    std::fs::write(dir.join("tree/sub/f"), b"1").unwrap();
    c.r#move(MoveRequest { source: dir.at("tree"), destination: dir.at("moved") }).await.expect("Move dir");
    assert_eq!(std::fs::read(dir.join("moved/sub/f")).unwrap(), b"1");

    let st = c.r#move(MoveRequest { source: dir.at("nope"), destination: dir.at("x") }).await.unwrap_err();
    assert_eq!(code(&st), "not_found", "{st:?}");
    let st = c.r#move(MoveRequest { source: dir.at("moved"), destination: dir.at("new") }).await.unwrap_err();
    assert_eq!(code(&st), "already_exists", "onto a non-empty directory: {st:?}");
    let st =
        c.r#move(MoveRequest { source: dir.at("moved"), destination: dir.at("moved/sub/inside") }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "into itself: {st:?}");
    let st = c.r#move(MoveRequest { source: String::new(), destination: dir.at("x") }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
}

#[tokio::test]
async fn remove_is_recursive_idempotent_and_spares_symlink_targets() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("remove");
    std::fs::create_dir_all(dir.join("tree/a/b")).unwrap();
    std::fs::write(dir.join("tree/a/b/f"), b"1").unwrap();
    std::fs::write(dir.join("keep"), b"k").unwrap();
    std::os::unix::fs::symlink(dir.join("keep"), dir.join("link")).unwrap();
    std::fs::write(dir.join("file"), b"f").unwrap();

    c.remove(RemoveRequest { path: dir.at("tree") }).await.expect("Remove a tree");
    assert!(!dir.join("tree").exists());
    c.remove(RemoveRequest { path: dir.at("file") }).await.expect("Remove a file");
    assert!(!dir.join("file").exists());
    c.remove(RemoveRequest { path: dir.at("link") }).await.expect("Remove a symlink");
    assert!(std::fs::symlink_metadata(dir.join("link")).is_err());
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"k", "the target stays");
    // Like E2B's envd: removing what is not there succeeds.
    c.remove(RemoveRequest { path: dir.at("never-was") }).await.expect("Remove a missing path");
    let st = c.remove(RemoveRequest { path: String::new() }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
}

// ---------------------------------------------------------------------------------------------
// ListDir
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn list_dir_depth_order_and_entries() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("list");
    for d in ["subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2/subdir2_1/deep"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("file1.txt"), b"Hello, world!").unwrap();
    std::os::unix::fs::symlink(dir.join("subdir1"), dir.join("zlink")).unwrap();
    set_xattr(&dir.join("file1.txt"), "user.e2b.tag", b"listed");

    let list = |depth: u32| {
        let mut c = c.clone();
        let path = dir.at("");
        async move {
            c.list_dir(ListDirRequest { path, depth })
                .await
                .unwrap_or_else(|st| panic!("ListDir depth {depth}: {st:?}"))
                .into_inner()
                .entries
        }
    };
    let names = |v: &[fspb::EntryInfo]| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>();

    let one = list(1).await;
    assert_eq!(names(&one), ["file1.txt", "subdir1", "subdir2", "zlink"]);
    assert_eq!(names(&list(0).await), names(&one), "depth 0 means 1");
    let f = &one[0];
    assert_eq!((f.r#type, f.size, f.path.clone()), (FileType::File as i32, 13, dir.at("file1.txt")));
    assert_eq!((f.mode, f.permissions.as_str()), (0o644, "-rw-r--r--"));
    assert_eq!(f.owner, my_name());
    assert_eq!(f.metadata.get("tag").map(String::as_str), Some("listed"));
    assert_eq!(one[3].r#type, FileType::Symlink as i32);

    let two = list(2).await;
    assert_eq!(
        names(&two),
        ["file1.txt", "subdir1", "subdir1_1", "subdir1_2", "subdir2", "subdir2_1", "zlink"],
        "depth-first, each directory followed by its entries; symlinks are not entered"
    );
    assert_eq!(two[2].path, dir.at("subdir1/subdir1_1"));
    assert_eq!(names(&list(3).await).len(), 8);
    assert_eq!(names(&list(50).await).len(), 8);

    // Listing through a symlink to a directory works; paths stay under the name asked for.
    let via = c.list_dir(ListDirRequest { path: dir.at("zlink"), depth: 1 }).await.expect("ListDir via symlink");
    let via = via.into_inner().entries;
    assert_eq!(names(&via), ["subdir1_1", "subdir1_2"]);
    assert_eq!(via[0].path, dir.at("zlink/subdir1_1"));

    let st = c.list_dir(ListDirRequest { path: dir.at("file1.txt"), depth: 1 }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
    let st = c.list_dir(ListDirRequest { path: dir.at("missing"), depth: 1 }).await.unwrap_err();
    assert_eq!(code(&st), "not_found", "{st:?}");
    let st = c.list_dir(ListDirRequest { path: String::new(), depth: 1 }).await.unwrap_err();
    assert_eq!(code(&st), "invalid_argument", "{st:?}");
}

// ---------------------------------------------------------------------------------------------
// Acting as the user
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn operations_act_as_the_calling_user() {
    if skip_without(is_root(), "root, to switch users") {
        return;
    }
    let (uid, gid) = ensure_user("user");
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let open = Scratch::new("owner").open_to_all();

    // Created as `user`: owned by `user`, parents too.
    let e = c
        .make_dir(as_user("user", MakeDirRequest { path: open.at("u/made") }))
        .await
        .expect("MakeDir as user")
        .into_inner()
        .entry
        .unwrap();
    assert_eq!(e.owner, "user");
    assert_eq!(owner_of(&open.join("u")), (uid, gid));
    assert_eq!(owner_of(&open.join("u/made")), (uid, gid));
    let r = upload(
        &envd,
        &[("path", &open.at("u/up/file.txt")), ("username", "user")],
        &[("content-type", "application/octet-stream")],
        "mine",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(owner_of(&open.join("u/up")), (uid, gid));
    assert_eq!(owner_of(&open.join("u/up/file.txt")), (uid, gid));
    let r = upload(
        &envd,
        &[("username", "user")],
        &[("content-type", &multipart_type())],
        multipart(&[("file", Some(&open.at("u/mp/part.txt")), b"part")]),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(owner_of(&open.join("u/mp/part.txt")), (uid, gid));

    // A root-only directory: `nobody` may neither look in nor write; root may.
    let closed = Scratch::new("closed");
    chmod(&closed.path, 0o700);
    std::fs::write(closed.join("secret"), b"s").unwrap();
    let st = c.stat(as_user("nobody", stat_req(&closed.at("secret")))).await.unwrap_err();
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    let st = c.list_dir(as_user("nobody", ListDirRequest { path: closed.at(""), depth: 1 })).await.unwrap_err();
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    let st = c.make_dir(as_user("nobody", MakeDirRequest { path: closed.at("x") })).await.unwrap_err();
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    let st = c.remove(as_user("nobody", RemoveRequest { path: closed.at("secret") })).await.unwrap_err();
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    let st = c
        .r#move(as_user("nobody", MoveRequest { source: closed.at("secret"), destination: open.at("stolen") }))
        .await
        .unwrap_err();
    assert_eq!(code(&st), "permission_denied", "{st:?}");
    assert!(closed.join("secret").exists());
    c.stat(as_user("root", stat_req(&closed.at("secret")))).await.expect("root may");

    // Over HTTP: 403, and nothing is created, in the scratch dir and in /root.
    let r = upload_octet(&envd, &closed.at("nope.txt"), &[], "x").await;
    assert_eq!(r.status, 200, "as root: {r:?}");
    let r = upload(
        &envd,
        &[("path", &closed.at("nobody.txt")), ("username", "nobody")],
        &[("content-type", "application/octet-stream")],
        "x",
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.json()["code"], 403, "{r:?}");
    assert!(!closed.join("nobody.txt").exists());
    let in_root = format!("/root/hangar-e2e-nobody-{}", std::process::id());
    let r = upload(
        &envd,
        &[("path", &in_root), ("username", "nobody")],
        &[("content-type", "application/octet-stream")],
        "x",
    )
    .await;
    assert_eq!(r.status, 403, "writing /root as nobody: {r:?}");
    assert!(!std::path::Path::new(&in_root).exists());
    let r = download(&envd, &[("path", &closed.at("secret")), ("username", "nobody")], &[]).await;
    assert_eq!(r.status, 403, "{r:?}");

    // A file `user` may not write (root's, 0644) in a directory it may write.
    std::fs::write(open.join("roots.txt"), b"root's").unwrap();
    chmod(&open.join("roots.txt"), 0o644);
    let r = upload(
        &envd,
        &[("path", &open.at("roots.txt")), ("username", "user")],
        &[("content-type", "application/octet-stream")],
        "overwrite",
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(std::fs::read(open.join("roots.txt")).unwrap(), b"root's");

    // Nothing leaked into the daemon's own identity: root still writes anywhere afterwards.
    let r = upload_octet(&envd, &closed.at("after.txt"), &[], "root again").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(owner_of(&closed.join("after.txt")), (0, 0));
}

#[tokio::test]
async fn files_user_param_and_authorization() {
    if skip_without(is_root(), "root, to switch users") {
        return;
    }
    let (uid, _) = ensure_user("user");
    let envd = Envd::start(&[]);
    let open = Scratch::new("whom").open_to_all();
    let octet = ("content-type", "application/octet-stream");

    // Authorization alone picks the user.
    let auth = basic_user("user");
    let r = upload(&envd, &[("path", &open.at("by-auth"))], &[octet, ("authorization", &auth)], "a").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(owner_of(&open.join("by-auth")).0, uid);
    // Both given: the username parameter wins (E2B's envd reads only the parameter here).
    let root_auth = basic_user("root");
    let r = upload(
        &envd,
        &[("path", &open.at("both")), ("username", "user")],
        &[octet, ("authorization", &root_auth)],
        "b",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(owner_of(&open.join("both")).0, uid);
    // Unknown users are 401, as parameter and as header.
    let r = upload(&envd, &[("path", &open.at("x")), ("username", "no-such-user-e2e")], &[octet], "x").await;
    assert_eq!((r.status, r.json()["code"].as_i64()), (401, Some(401)), "{r:?}");
    let r = download(&envd, &[("path", &open.at("both")), ("username", "no-such-user-e2e")], &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    let bad = basic_user("no-such-user-e2e");
    let r = download(&envd, &[("path", &open.at("both"))], &[("authorization", &bad)]).await;
    assert_eq!(r.status, 401, "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// GET /files
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn download_whole_ranges_and_errors() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("get");
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    std::fs::write(dir.join("f.bin"), &data).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let f = dir.at("f.bin");

    let r = download(&envd, &[("path", &f)], &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(&r.body[..], &data[..]);
    assert_eq!(r.headers["content-length"], "1000");
    assert_eq!(r.headers["accept-ranges"], "bytes");

    let r = download(&envd, &[("path", &f)], &[("range", "bytes=10-19")]).await;
    assert_eq!(r.status, 206, "{r:?}");
    assert_eq!(r.headers["content-range"], "bytes 10-19/1000");
    assert_eq!(&r.body[..], &data[10..20]);
    let r = download(&envd, &[("path", &f)], &[("range", "bytes=990-")]).await;
    assert_eq!((r.status, &r.body[..]), (206, &data[990..]));
    let r = download(&envd, &[("path", &f)], &[("range", "bytes=-5")]).await;
    assert_eq!((r.status, &r.body[..]), (206, &data[995..]));
    assert_eq!(r.headers["content-range"], "bytes 995-999/1000");
    let r = download(&envd, &[("path", &f)], &[("range", "bytes=900-5000")]).await;
    assert_eq!((r.status, r.body.len()), (206, 100));
    let r = download(&envd, &[("path", &f)], &[("range", "bytes=1000-")]).await;
    assert_eq!(r.status, 416, "{r:?}");
    assert_eq!(r.headers["content-range"], "bytes */1000");
    // Several ranges are not served piecewise: the whole file comes back.
    let r = download(&envd, &[("path", &f)], &[("range", "bytes=0-1,5-6")]).await;
    assert_eq!((r.status, r.body.len()), (200, 1000));

    let r = download(&envd, &[("path", &dir.at("missing"))], &[]).await;
    assert_eq!((r.status, r.json()["code"].as_i64()), (404, Some(404)), "{r:?}");
    assert!(r.json()["message"].as_str().unwrap_or("").contains("missing"), "{r:?}");
    let r = download(&envd, &[("path", &dir.at("sub"))], &[]).await;
    assert_eq!((r.status, r.json()["code"].as_i64()), (400, Some(400)), "a directory: {r:?}");
    let r = download(&envd, &[], &[]).await;
    assert_eq!(r.status, 400, "no path: {r:?}");

    // An empty file is an empty 200.
    std::fs::write(dir.join("empty"), b"").unwrap();
    let r = download(&envd, &[("path", &dir.at("empty"))], &[]).await;
    assert_eq!((r.status, r.body.len()), (200, 0));
}

#[tokio::test]
async fn download_gzip_when_accepted() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("gzget");
    let text = "compress me ".repeat(10_000);
    std::fs::write(dir.join("t.txt"), &text).unwrap();
    let p = dir.at("t.txt");

    let r = download(&envd, &[("path", &p)], &[("accept-encoding", "gzip")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-encoding"], "gzip");
    assert!(r.body.len() < text.len() / 10, "compressed: {} bytes", r.body.len());
    assert_eq!(gunzip(&r.body), text.as_bytes());

    let r = download(&envd, &[("path", &p)], &[("accept-encoding", "gzip;q=0, identity")]).await;
    assert!(r.headers.get("content-encoding").is_none(), "{r:?}");
    assert_eq!(&r.body[..], text.as_bytes());
    // A range is served from the file itself, uncompressed.
    let r = download(&envd, &[("path", &p)], &[("accept-encoding", "gzip"), ("range", "bytes=0-7")]).await;
    assert_eq!((r.status, &r.body[..]), (206, &b"compress"[..]));
    assert!(r.headers.get("content-encoding").is_none(), "{r:?}");
    let r = download(&envd, &[("path", &p)], &[("accept-encoding", "identity;q=0")]).await;
    assert_eq!(r.status, 400, "nothing acceptable: {r:?}");
}

// ---------------------------------------------------------------------------------------------
// POST /files
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn upload_octet_stream_and_gzip() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("post");

    let r = upload_octet(&envd, &dir.at("new/dirs/a.txt"), &[], "hello").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!([{"path": dir.at("new/dirs/a.txt"), "name": "a.txt", "type": "file"}]));
    assert_eq!(std::fs::read(dir.join("new/dirs/a.txt")).unwrap(), b"hello");
    // Overwriting truncates.
    let r = upload_octet(&envd, &dir.at("new/dirs/a.txt"), &[], "hi").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(std::fs::read(dir.join("new/dirs/a.txt")).unwrap(), b"hi");

    let payload = "gzip body ".repeat(5000);
    let r = upload_octet(&envd, &dir.at("gz.txt"), &[("content-encoding", "gzip")], gzip(payload.as_bytes())).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(std::fs::read_to_string(dir.join("gz.txt")).unwrap(), payload);

    let r = upload_octet(&envd, &dir.at("bad.txt"), &[("content-encoding", "gzip")], "not gzip at all").await;
    assert_eq!(r.status, 400, "corrupt gzip: {r:?}");
    let r = upload_octet(&envd, &dir.at("br.txt"), &[("content-encoding", "br")], "x").await;
    assert_eq!(r.status, 400, "unsupported encoding: {r:?}");
    let r = upload(&envd, &[], &[("content-type", "application/octet-stream")], "x").await;
    assert_eq!(r.status, 400, "octet-stream without a path: {r:?}");
    let r = upload_octet(&envd, &dir.at("new"), &[], "x").await;
    assert_eq!(r.status, 400, "onto a directory: {r:?}");
    let r = upload_octet(&envd, &dir.at("new/dirs/a.txt/under"), &[], "x").await;
    assert_eq!(r.status, 400, "a file as a parent: {r:?}");
    let r = upload(&envd, &[("path", &dir.at("t"))], &[("content-type", "text/plain")], "x").await;
    assert_eq!(r.status, 400, "unknown content type: {r:?}");

    // Relative paths land in the acting user's home.
    let name = format!("hangar-e2e-rel-{}.txt", std::process::id());
    let r = upload_octet(&envd, &name, &[], "rel").await;
    assert_eq!(r.status, 200, "{r:?}");
    let written = r.json()[0]["path"].as_str().unwrap_or("").to_string();
    let _ = std::fs::remove_file(&written);
    assert!(written.starts_with('/') && written.ends_with(&name), "{written}");
}

#[tokio::test]
async fn upload_multipart_one_and_many() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("multipart");
    let ct = multipart_type();

    // One part, path from the query.
    let body = multipart(&[("file", Some("ignored-name.txt"), b"one")]);
    let r = upload(&envd, &[("path", &dir.at("one.txt"))], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!([{"path": dir.at("one.txt"), "name": "one.txt", "type": "file"}]));
    assert_eq!(std::fs::read(dir.join("one.txt")).unwrap(), b"one");

    // Several parts, each filename a whole path; other fields skipped.
    let (a, b) = (dir.at("m/a.txt"), dir.at("m/deep/b.bin"));
    let binary: Vec<u8> = (0..=255u8).collect();
    let body = multipart(&[("file", Some(&a), b"A"), ("note", None, b"skip me"), ("file", Some(&b), &binary)]);
    let r = upload(&envd, &[], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json(),
        json!([{"path": a, "name": "a.txt", "type": "file"}, {"path": b, "name": "b.bin", "type": "file"}])
    );
    assert_eq!(std::fs::read(dir.join("m/deep/b.bin")).unwrap(), binary);

    // gzip over the whole multipart body.
    let body = gzip(&multipart(&[("file", Some(&dir.at("gzpart.txt")), b"zipped part")]));
    let r = upload(&envd, &[], &[("content-type", &ct), ("content-encoding", "gzip")], body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(std::fs::read(dir.join("gzpart.txt")).unwrap(), b"zipped part");

    // The same path twice in one upload.
    let body = multipart(&[("file", Some("x"), b"1"), ("file", Some("y"), b"2")]);
    let r = upload(&envd, &[("path", &dir.at("dup.txt"))], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(std::fs::read(dir.join("dup.txt")).unwrap(), b"1", "the first was written");
}

#[tokio::test]
async fn upload_malformed_multipart_is_400() {
    let envd = Envd::start(&[]);
    let dir = Scratch::new("badmp");
    let ct = multipart_type();

    let r = upload(&envd, &[("path", &dir.at("x"))], &[("content-type", &ct)], "this is not multipart").await;
    assert_eq!((r.status, r.json()["code"].as_i64()), (400, Some(400)), "{r:?}");
    // Cut off in the middle of a part.
    let mut body = multipart(&[("file", Some(&dir.at("cut.txt")), b"0123456789")]);
    body.truncate(body.len() - 20);
    let r = upload(&envd, &[], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 400, "truncated: {r:?}");
    let r = upload(&envd, &[], &[("content-type", "multipart/form-data")], "x").await;
    assert_eq!(r.status, 400, "no boundary: {r:?}");
    let body = multipart(&[("other", None, b"no file part")]);
    let r = upload(&envd, &[], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 400, "no part named file: {r:?}");
    let body = multipart(&[("file", None, b"no name, no path")]);
    let r = upload(&envd, &[], &[("content-type", &ct)], body).await;
    assert_eq!(r.status, 400, "no filename: {r:?}");
    // The daemon is fine afterwards.
    assert_eq!(envd.health().await, 204);
}

#[tokio::test]
async fn upload_metadata_round_trip() {
    let envd = Envd::start(&[]);
    let mut c = fs_client(&envd).await;
    let dir = Scratch::new("meta");
    let p = dir.at("m.txt");

    let r = upload_octet(&envd, &p, &[("x-metadata-Author", "mish"), ("X-Metadata-purpose", "upload")], "x").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()[0]["metadata"], json!({"author": "mish", "purpose": "upload"}), "keys lowercased");
    assert_eq!(get_xattr(&dir.join("m.txt"), "user.e2b.author").as_deref(), Some(&b"mish"[..]));
    let e = c.stat(stat_req(&p)).await.expect("Stat").into_inner().entry.unwrap();
    assert_eq!(e.metadata, [("author".into(), "mish".into()), ("purpose".into(), "upload".into())].into());

    // Overwriting without metadata clears it (xattrs would otherwise survive O_TRUNC).
    let r = upload_octet(&envd, &p, &[], "y").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()[0].get("metadata").is_none(), "{r:?}");
    let e = c.stat(stat_req(&p)).await.expect("Stat").into_inner().entry.unwrap();
    assert!(e.metadata.is_empty(), "{:?}", e.metadata);

    // Multipart: the same metadata on every file.
    let body = multipart(&[("file", Some(&dir.at("a")), b"1"), ("file", Some(&dir.at("b")), b"2")]);
    let r = upload(&envd, &[], &[("content-type", &multipart_type()), ("x-metadata-source", "suite")], body).await;
    assert_eq!(r.status, 200, "{r:?}");
    for f in ["a", "b"] {
        assert_eq!(get_xattr(&dir.join(f), "user.e2b.source").as_deref(), Some(&b"suite"[..]), "{f}");
    }

    let long_key = format!("x-metadata-{}", "k".repeat(300));
    let r = upload_octet(&envd, &dir.at("bad"), &[(&long_key, "v")], "x").await;
    assert_eq!(r.status, 400, "key too long: {r:?}");
    let big = "v".repeat(5000);
    let r = upload_octet(&envd, &dir.at("bad"), &[("x-metadata-k", &big)], "x").await;
    assert_eq!(r.status, 400, "too much metadata: {r:?}");
}

#[tokio::test]
async fn upload_to_a_full_disk_is_507() {
    if skip_without(is_root(), "root, to mount a tmpfs") {
        return;
    }
    let dir = Scratch::new("full");
    let mnt = dir.at("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", &mnt]).status();
    if skip_without(matches!(mounted, Ok(s) if s.success()), "a tmpfs mount") {
        return;
    }
    struct Unmount(String);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let envd = Envd::start(&[]);
    let r = upload_octet(&envd, &format!("{mnt}/big"), &[], vec![7u8; 3 << 20]).await;
    assert_eq!((r.status, r.json()["code"].as_i64()), (507, Some(507)), "{r:?}");
    let r = upload_octet(&envd, &format!("{mnt}/small"), &[], "fits?").await;
    assert!(r.status == 200 || r.status == 507, "{r:?}");
    assert_eq!(envd.health().await, 204);
}

// ---------------------------------------------------------------------------------------------
// Large transfers stream
// ---------------------------------------------------------------------------------------------

/// 1 GiB up and down: the daemon's peak resident memory must not grow with the size. Neither
/// side holds the data: the test generates and checks it as it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_upload_and_download_in_flat_memory() {
    const SIZE_MIB: u64 = 1024;
    const LIMIT: Duration = Duration::from_secs(600);
    let envd = Envd::start(&[]);
    let dir = Scratch::new("gib");
    let path = dir.at("big.bin");

    // Warm up the paths a transfer uses, so first-use allocations are not counted as growth.
    let r = stream_upload(&envd, &path, 4, STEP).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(stream_download_check(&envd, &path, STEP).await, 4 * MIB);
    let hwm = || vm_hwm_kib(envd.pid()).expect("the daemon's VmHWM in /proc/PID/status");
    let before = hwm();

    let started = std::time::Instant::now();
    let r = stream_upload(&envd, &path, SIZE_MIB, LIMIT).await;
    assert_eq!(r.status, 200, "{r:?}");
    let up = started.elapsed();
    assert_eq!(std::fs::metadata(dir.join("big.bin")).unwrap().len(), SIZE_MIB * MIB);
    let after_upload = hwm();

    let started = std::time::Instant::now();
    assert_eq!(stream_download_check(&envd, &path, LIMIT).await, SIZE_MIB * MIB);
    let down = started.elapsed();
    let after = hwm();
    std::fs::remove_file(dir.join("big.bin")).unwrap();

    eprintln!(
        "1 GiB: upload {up:?}, download {down:?}; daemon VmHWM {before} KiB before, {after_upload} KiB after the \
         upload, {after} KiB after the download (growth {} KiB)",
        after - before
    );
    assert!(after - before < 64 * 1024, "peak memory grew by {} KiB moving 1 GiB", after - before);
}
