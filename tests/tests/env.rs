//! The child's environment, cwd, global vars from `/init`, and the Unix user.

use std::collections::HashMap;

use hangar_e2e::*;
use serde_json::json;

fn whoami() -> String {
    let out = std::process::Command::new("id").arg("-un").output().expect("id -un");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn home_of(user: &str) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 6 && f[0] == user {
            return f[5].to_string();
        }
    }
    panic!("{user} not in /etc/passwd");
}

/// Runs `script` over Connect JSON with optional envs/cwd and headers; returns (stdout, outcome).
async fn run_connect(
    envd: &Envd,
    script: &str,
    envs: serde_json::Value,
    cwd: Option<&str>,
    headers: &[(&str, &str)],
) -> (String, StreamOutcome) {
    let mut process = json!({"cmd": "/bin/bash", "args": ["-c", script], "envs": envs});
    if let Some(c) = cwd {
        process["cwd"] = json!(c);
    }
    let out =
        envd.server_stream("/process.Process/Start", &json!({"process": process, "stdin": false}), headers, STEP).await;
    (out.collected().stdout_str(), out)
}

#[tokio::test]
async fn env_defaults_and_request_overrides() {
    let envd = Envd::start(&[]);
    let me = whoami();
    let (out, o) = run_connect(
        &envd,
        "printf '%s|%s|%s|%s|%s' \"$FOO\" \"$USER\" \"$LOGNAME\" \"$HOME\" \"$PATH\"",
        json!({"FOO": "bar baz"}),
        None,
        &[],
    )
    .await;
    o.assert_clean_end();
    let f: Vec<&str> = out.split('|').collect();
    assert_eq!(f.len(), 5, "{out:?}");
    assert_eq!(f[0], "bar baz", "request env");
    assert_eq!(f[1], me, "USER");
    assert_eq!(f[2], me, "LOGNAME");
    assert_eq!(f[3], home_of(&me), "HOME");
    assert!(f[4].contains("/usr/bin") || f[4].contains("/bin"), "PATH: {:?}", f[4]);

    // request vars override the defaults
    let (out, _) = run_connect(
        &envd,
        "printf '%s|%s' \"$PATH\" \"$HOME\"",
        json!({"PATH": "/opt/x:/usr/bin:/bin", "HOME": "/elsewhere"}),
        None,
        &[],
    )
    .await;
    assert_eq!(out, "/opt/x:/usr/bin:/bin|/elsewhere");
}

#[tokio::test]
async fn init_env_vars_global_and_overridable() {
    let envd = Envd::start(&[]);
    let r = envd
        .http(
            "POST",
            "/init",
            &[("content-type", "application/json")],
            json!({"envVars": {"G1": "global-one", "OVER": "from-global"}}).to_string(),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let envs = envd.http("GET", "/envs", &[], "").await;
    assert_eq!(envs.status, 200, "{envs:?}");
    let v = envs.json();
    assert_eq!(v["G1"], json!("global-one"), "{v}");
    assert_eq!(v["OVER"], json!("from-global"), "{v}");

    let (out, o) =
        run_connect(&envd, "printf '%s|%s' \"$G1\" \"$OVER\"", json!({"OVER": "from-request"}), None, &[]).await;
    o.assert_clean_end();
    assert_eq!(out, "global-one|from-request");

    // gRPC sees the globals too
    let mut client = envd.process().await;
    let mut req = bash("printf '%s' \"$G1\"");
    req.process.as_mut().unwrap().envs = HashMap::new();
    let c = grpc_run(&mut client, req, STEP).await;
    assert_eq!(c.stdout_str(), "global-one");

    // a second /init replaces the globals
    let r = envd
        .http("POST", "/init", &[("content-type", "application/json")], json!({"envVars": {"G2": "two"}}).to_string())
        .await;
    assert_eq!(r.status, 204);
    let v = envd.http("GET", "/envs", &[], "").await.json();
    assert_eq!(v, json!({"G2": "two"}), "envVars replace the previous set");
}

#[tokio::test]
async fn cwd_request_default_and_home() {
    let me = whoami();
    let envd = Envd::start(&[]);
    let (out, _) = run_connect(&envd, "pwd", json!({}), Some("/tmp"), &[]).await;
    assert_eq!(out, "/tmp\n", "request cwd");
    let (out, _) = run_connect(&envd, "pwd", json!({}), None, &[]).await;
    assert_eq!(out.trim_end(), home_of(&me), "no cwd: the user's home");

    let envd = Envd::start(&["--default-workdir", "/usr"]);
    let (out, _) = run_connect(&envd, "pwd", json!({}), None, &[]).await;
    assert_eq!(out, "/usr\n", "--default-workdir");
    let (out, _) = run_connect(&envd, "pwd", json!({}), Some("/tmp"), &[]).await;
    assert_eq!(out, "/tmp\n", "request cwd beats the default");

    let r = envd
        .http("POST", "/init", &[("content-type", "application/json")], json!({"defaultWorkdir": "/var"}).to_string())
        .await;
    assert_eq!(r.status, 204);
    let (out, _) = run_connect(&envd, "pwd", json!({}), None, &[]).await;
    assert_eq!(out, "/var\n", "/init defaultWorkdir");
}

#[tokio::test]
async fn user_from_basic_auth() {
    if skip_without(is_root(), "root, to switch users") {
        return;
    }
    let envd = Envd::start(&[]);
    let auth = basic_user("nobody");
    let headers = [("authorization", auth.as_str())];
    let (out, o) =
        run_connect(&envd, "id -un; printf '%s|%s\\n' \"$USER\" \"$HOME\"", json!({}), Some("/tmp"), &headers).await;
    o.assert_clean_end();
    assert_eq!(out, format!("nobody\nnobody|{}\n", home_of("nobody")));

    // gRPC: the same header as metadata
    let mut client = envd.process().await;
    let mut req = start_req("/usr/bin/id", &["-un"]);
    req.process.as_mut().unwrap().cwd = Some("/tmp".into());
    let req = with_meta(tonic::Request::new(req), "authorization", &auth);
    let mut s = client.start(req).await.expect("Start as nobody").into_inner();
    let c = collect(&mut s, STEP).await;
    assert_eq!(c.stdout_str(), "nobody\n");

    // hangar List records the user
    let mut procs = envd.processes().await;
    let list = hangar_list(&mut procs).await;
    let p = list.iter().find(|p| p.pid == c.pid()).unwrap_or_else(|| panic!("{list:?}"));
    assert_eq!(p.user, "nobody");

    // without the header: the daemon's default user (root here)
    let (out, _) = run_connect(&envd, "id -un", json!({}), None, &[]).await;
    assert_eq!(out, "root\n");
}

#[tokio::test]
async fn unknown_user_is_unauthenticated() {
    if skip_without(is_root(), "root, to switch users") {
        return;
    }
    let envd = Envd::start(&[]);
    let auth = basic_user("no-such-user-hangar");
    let (_, o) = run_connect(&envd, "id -un", json!({}), None, &[("authorization", auth.as_str())]).await;
    assert_eq!(o.error_code().as_deref(), Some("unauthenticated"), "{o:#?}");
    assert!(o.messages.is_empty(), "no process for an unknown user: {o:#?}");

    let mut client = envd.process().await;
    let req = with_meta(tonic::Request::new(start_req("/usr/bin/id", &[])), "authorization", &auth);
    let code = match client.start(req).await {
        Err(st) => st.code(),
        Ok(r) => {
            let c = collect(&mut r.into_inner(), STEP).await;
            assert!(c.events.is_empty(), "{c:?}");
            match c.error {
                Some((code, _)) if code == "unauthenticated" => tonic::Code::Unauthenticated,
                other => panic!("want unauthenticated, got {other:?}"),
            }
        }
    };
    assert_eq!(code, tonic::Code::Unauthenticated);
}

#[tokio::test]
async fn default_user_flag_and_init() {
    if skip_without(is_root(), "root, to switch users") {
        return;
    }
    let envd = Envd::start(&["--default-user", "nobody"]);
    let (out, o) = run_connect(&envd, "id -un", json!({}), Some("/tmp"), &[]).await;
    o.assert_clean_end();
    assert_eq!(out, "nobody\n", "--default-user");
    let envd = Envd::start(&[]);
    let r = envd
        .http("POST", "/init", &[("content-type", "application/json")], json!({"defaultUser": "nobody"}).to_string())
        .await;
    assert_eq!(r.status, 204);
    let (out, _) = run_connect(&envd, "id -un", json!({}), Some("/tmp"), &[]).await;
    assert_eq!(out, "nobody\n", "/init defaultUser");
}

/// `~` and relative cwds resolve against the home and the default workdir.
#[tokio::test]
async fn cwd_tilde_and_relative() {
    let me = whoami();
    let envd = Envd::start(&["--default-workdir", "/usr"]);
    let (out, o) = run_connect(&envd, "pwd", json!({}), Some("~"), &[]).await;
    o.assert_clean_end();
    assert_eq!(out.trim_end(), home_of(&me), "~");
    let (out, _) = run_connect(&envd, "pwd", json!({}), Some("bin"), &[]).await;
    assert_eq!(out, "/usr/bin\n", "relative to the default workdir");
    // a file is not a directory
    let (_, o) = run_connect(&envd, "pwd", json!({}), Some("/etc/passwd"), &[]).await;
    assert_eq!(o.error_code().as_deref(), Some("invalid_argument"), "{o:#?}");
}

/// `--env KEY=VALUE` sets global variables at start-up, as `/init`'s `envVars` would; they
/// override the user's defaults (HOME here) and a request's `envs` override them.
#[tokio::test]
async fn env_flag_sets_globals() {
    let envd = Envd::start(&["--env", "G1=from-flag", "--env", "HOME=/tmp", "--env", "OVER=flag"]);
    let v = envd.http("GET", "/envs", &[], "").await.json();
    assert_eq!((v["G1"].clone(), v["HOME"].clone()), (json!("from-flag"), json!("/tmp")), "{v}");
    let (out, o) =
        run_connect(&envd, "printf '%s|%s|%s' \"$G1\" \"$HOME\" \"$OVER\"", json!({"OVER": "request"}), None, &[])
            .await;
    o.assert_clean_end();
    assert_eq!(out, "from-flag|/tmp|request");
}

/// A process starts with every signal at its default and none blocked, whatever the daemon
/// catches or ignores (it catches SIGCHLD and SIGTERM, and Rust ignores SIGPIPE). The daemon
/// blocks every signal while a child shares its memory before exec: the child must unblock
/// them, and an ignored signal stays ignored across exec unless the child resets it (exec resets
/// caught ones itself). Both ways a process is started: created in its cgroup (`clone3`) and
/// without cgroups (`clone`).
#[tokio::test]
async fn processes_start_with_default_signal_dispositions() {
    let mask = |status: &str, field: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
        u64::from_str_radix(line[field.len()..].trim(), 16).expect("a hex mask")
    };
    for &mode in start_modes() {
        let mut envd = Envd::builder().env("HANGAR_ENVD_CGROUPS", mode).start();
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        let daemon = std::fs::read_to_string(format!("/proc/{}/status", envd.pid())).expect("the daemon's status");
        // What exec keeps is what this can see: ignored and blocked signals (exec resets caught
        // ones by itself, so the child's `SigCgt` would be 0 whatever the daemon did).
        assert_ne!(mask(&daemon, "SigIgn:") & sigpipe, 0, "{mode}: the daemon ignores SIGPIPE, or this proves nothing");
        let mut client = envd.process().await;
        let c = grpc_run(&mut client, start_req("/bin/cat", &["/proc/self/status"]), STEP).await;
        let status = c.stdout_str();
        assert_eq!(mask(&status, "SigBlk:"), 0, "{mode}: nothing blocked");
        assert_eq!(mask(&status, "SigIgn:") & sigpipe, 0, "{mode}: SIGPIPE at its default");
        envd.assert_healthy_no_leaks(std::time::Duration::from_secs(2)).await;
    }
}
