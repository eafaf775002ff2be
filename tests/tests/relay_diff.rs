//! A session's diff on the local provider, end to end through the real relay and a real git
//! repository: a harness profile stands in for the agent and changes the work tree. The diff
//! compares the work tree with where the turn started (recorded by the relay before the harness
//! ran), shows untracked files through an index of hangar's (the agent's is left as it was),
//! runs nothing the repository's configuration or attributes name, says when it was cut, says
//! when there is no repository, and is nobody's but its person's. `hangar diff` prints it as a
//! table, a file's patch, or the relay's JSON.
use hangar_e2e::sessions::exec_ok as exec;
use hangar_e2e::{
    cli::Hangar,
    relay::{Relay, StateDir, ADMIN},
    sessions::{harness_file, profile, start, until_ended},
    STEP,
};
use serde_json::{json, Value};

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// An agent's work: `script` run by bash in the session's directory, its prompt read first.
fn agent(name: &str, script: &str) -> String {
    profile(name, &argv(&["bash", "-c", &format!("cat >/dev/null; {script}")]), None, "text", "none")
}

/// Modifies a tracked file, adds one the repository does not track, deletes one, stages
/// another in its own index, and renames one.
const WORK: &str = "printf 'a\\nB\\nc\\nd\\n' > f.txt; printf 'new\\n' > 'added file.txt'; rm gone.txt; \
     echo staged > staged.txt; git add staged.txt; git mv moved.txt renamed.txt";

/// 501 new files and a file of 1.2 MB.
const FLOOD: &str = "mkdir many; for i in $(seq 0 500); do echo $i > many/f$i; done; seq 1 200000 > big.txt";

fn relay(state: &StateDir) -> Relay {
    let profiles = vec![
        agent("worker", WORK),
        agent("flood", FLOOD),
        agent("evil", "echo changed >> f.txt; echo new > untracked.txt"),
    ];
    let file = harness_file(&state.0, &profiles);
    Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    )
}

/// A repository in `dir` (below the sandbox's working directory) with one commit; its head.
async fn repo(relay: &Relay, dir: &str) -> String {
    let setup = format!(
        "mkdir -p {dir} && cd {dir} && git init -q -b main && printf 'a\\nb\\nc\\n' > f.txt && seq 1 5 > gone.txt && \
         seq 1 20 > moved.txt && git add . && git -c user.email=a@b -c user.name=t commit -q -m base && git rev-parse HEAD"
    );
    exec(relay, &setup).await.trim().to_string()
}

/// A session of `harness` in `cwd`, run to its end.
async fn run(relay: &Relay, name: &str, harness: &str, cwd: &str) -> Value {
    let body = json!({"name": name, "sandbox": "default", "harness": harness, "prompt": "work", "cwd": cwd});
    start(relay, ADMIN, body).await;
    let s = until_ended(relay, ADMIN, name, STEP * 2).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    s
}

async fn diff(relay: &Relay, token: &str, query: &str) -> Value {
    let r = relay.call("GET", query, Some(token), None).await;
    assert_eq!(r.status, 200, "{query}: {r:?}");
    r.json()
}

fn file<'a>(d: &'a Value, path: &str) -> &'a Value {
    d["files"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["path"] == json!(path)))
        .unwrap_or_else(|| panic!("no {path}: {d}"))
}

#[tokio::test]
async fn a_turns_changes_are_its_diff_and_the_agents_index_is_left_as_it_was() {
    let state = StateDir::new();
    let relay = relay(&state);
    let base = repo(&relay, "w").await;
    run(&relay, "work", "worker", "w").await;
    // The objects too: a diff writes none into the agent's `.git` (a root-owned one there would
    // keep the agent from writing its own objects beside it).
    let index = "cd w && git ls-files --stage && git status --porcelain && find .git/objects -type f | sort";
    let before = exec(&relay, index).await;

    let d = diff(&relay, ADMIN, "/api/sessions/work/diff").await;
    assert_eq!(
        (d["repository"].clone(), d["base"].clone(), d["turn"].clone()),
        (json!(true), json!(base), json!(1)),
        "{d}"
    );
    assert!(d["session"].as_str().is_some_and(|s| s.starts_with("ses_")), "{d}");
    assert!(d["computed_at"].as_f64().is_some_and(|t| t > 1.7e9), "epoch seconds: {d}");
    let counts = |f: &Value| (f["status"].clone(), f["added"].clone(), f["removed"].clone(), f["binary"].clone());
    assert_eq!(counts(file(&d, "f.txt")), (json!("modified"), json!(2), json!(1), json!(false)));
    assert_eq!(counts(file(&d, "added file.txt")), (json!("added"), json!(1), json!(0), json!(false)), "untracked");
    assert_eq!(counts(file(&d, "gone.txt")), (json!("deleted"), json!(0), json!(5), json!(false)));
    assert_eq!(counts(file(&d, "staged.txt")), (json!("added"), json!(1), json!(0), json!(false)));
    assert_eq!(counts(file(&d, "renamed.txt")), (json!("renamed"), json!(0), json!(0), json!(false)));
    assert_eq!(file(&d, "renamed.txt")["old_path"], json!("moved.txt"));
    assert_eq!(d["files"].as_array().map(Vec::len), Some(5), "{d}");
    assert_eq!(d["totals"], json!({"files": 5, "added": 4, "removed": 6}));
    assert_eq!(d["truncated"], Value::Null);

    let p = diff(&relay, ADMIN, "/api/sessions/work/diff?path=f.txt").await;
    assert_eq!((p["path"].clone(), p["truncated"].clone()), (json!("f.txt"), Value::Null), "{p}");
    let patch = p["patch"].as_str().expect("patch");
    assert!(
        patch.contains("--- a/f.txt\n+++ b/f.txt\n") && patch.contains("-b\n+B\n") && patch.contains("+d\n"),
        "{patch}"
    );
    let p = diff(&relay, ADMIN, "/api/sessions/work/diff?path=added%20file.txt").await;
    assert!(p["patch"].as_str().is_some_and(|t| t.contains("new file mode") && t.contains("+new")), "{p}");
    let p = diff(&relay, ADMIN, "/api/sessions/work/diff?path=renamed.txt").await;
    assert!(p["patch"].as_str().is_some_and(|t| t.contains("rename from moved.txt")), "{p}");

    assert_eq!(exec(&relay, index).await, before, "the agent's index, status and objects are as they were");
    assert!(before.contains("staged.txt") && before.contains("?? \"added file.txt\""), "{before}");

    // A job's diff is its session's.
    let job = relay
        .call(
            "POST",
            "/api/jobs",
            Some(ADMIN),
            Some(json!({"sandbox": "default", "harness": "worker", "prompt": "p", "cwd": "w"})),
        )
        .await;
    assert_eq!(job.status, 201, "{job:?}");
    let id = job.json()["id"].as_str().expect("id").to_string();
    let mut j = json!(null);
    for _ in 0..300 {
        j = relay.call("GET", &format!("/api/jobs/{id}"), Some(ADMIN), None).await.json();
        if ["succeeded", "failed"].iter().any(|s| j["state"] == json!(s)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let jd = diff(&relay, ADMIN, &format!("/api/jobs/{id}/diff")).await;
    assert_eq!(jd["session"], j["session"], "{jd}");
    assert_eq!(jd["repository"], json!(true), "{jd}");
    let other_jobs = relay.token("pipeline", "jobs").await;
    let r = relay.call("GET", &format!("/api/jobs/{id}/diff"), Some(&other_jobs.secret), None).await;
    assert_eq!(r.status, 404, "another's job: {r:?}");

    // Nobody's but its person's: another's token finds no such session.
    let other = relay.token("bob", "user").await;
    for q in ["/api/sessions/work/diff", "/api/sessions/work/diff?path=f.txt"] {
        let r = relay.call("GET", q, Some(&other.secret), None).await;
        assert_eq!(r.status, 404, "{q}: {r:?}");
        assert!(!String::from_utf8_lossy(&r.body).contains("f.txt"), "{r:?}");
    }
    // Bad asks get clear errors.
    for (q, status, says) in [
        ("/api/sessions/work/diff?path=../etc/passwd", 400, "path"),
        ("/api/sessions/work/diff?path=/etc/passwd", 400, "path"),
        ("/api/sessions/work/diff?turn=7", 404, "no turn 7"),
        ("/api/sessions/work/diff?nope=1", 400, "nope"),
        ("/api/sessions/nope/diff", 404, "nope"),
    ] {
        let r = relay.call("GET", q, Some(ADMIN), None).await;
        assert_eq!(r.status, status, "{q}: {r:?}");
        assert!(String::from_utf8_lossy(&r.body).contains(says), "{q}: {r:?}");
    }
}

/// Whether the marker the repository's scripts leave (beside the repository) is there.
async fn marked(relay: &Relay) -> bool {
    exec(relay, "if [ -e ran ]; then echo yes; else echo no; fi").await.trim() == "yes"
}

#[tokio::test]
async fn nothing_the_repositorys_configuration_names_runs() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay, "w").await;
    // After the commit: every way a repository's own configuration, attributes or hooks can make
    // git run a program, each leaving the marker.
    let evil = "m=$PWD/ran && e=$PWD/evil.sh && printf '#!/bin/sh\\ntouch %s\\ncat\\n' \"$m\" > \"$e\" && chmod +x \"$e\" && cd w && \
         git config core.pager \"$e\" && git config diff.external \"$e\" && git config core.fsmonitor \"$e\" && \
         git config filter.evil.clean \"$e\" && git config filter.evil.smudge \"$e\" && git config filter.evil.process \"$e\" && \
         git config filter.evil.required true && git config diff.evil.textconv \"$e\" && git config diff.evil.command \"$e\" && \
         git config core.attributesFile \"$PWD/attrs\" && printf '* diff=evil filter=evil\\n' > attrs && \
         printf '* diff=evil filter=evil\\n' > .gitattributes && git config core.hooksPath \"$PWD/hooks\" && mkdir -p hooks .git/hooks && \
         for h in post-index-change pre-commit post-checkout; do cp \"$e\" hooks/$h; cp \"$e\" .git/hooks/$h; done && \
         git config alias.diff-files \"!touch $m\" && git config core.editor \"$e\" && git config pager.diff \"$e\"";
    exec(&relay, evil).await;
    assert!(!marked(&relay).await, "the setup ran nothing");
    run(&relay, "evil", "evil", "w").await;
    let d = diff(&relay, ADMIN, "/api/sessions/evil/diff").await;
    assert_eq!(file(&d, "f.txt")["added"], json!(1), "{d}");
    assert_eq!(file(&d, "untracked.txt")["status"], json!("added"), "{d}");
    let p = diff(&relay, ADMIN, "/api/sessions/evil/diff?path=f.txt").await;
    assert!(p["patch"].as_str().is_some_and(|t| t.contains("+changed")), "{p}");
    let p = diff(&relay, ADMIN, "/api/sessions/evil/diff?path=untracked.txt").await;
    assert!(p["patch"].as_str().is_some_and(|t| t.contains("+new")), "{p}");
    assert!(!marked(&relay).await, "a program the repository named ran");
    // The marker is what the script leaves: git run with the agent's own configuration runs it.
    exec(&relay, "cd w && git diff >/dev/null 2>&1; true").await;
    assert!(marked(&relay).await, "the test's script never runs, so its absence above says nothing");
}

#[tokio::test]
async fn bounds_are_said_and_a_directory_in_no_repository_has_no_diff() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay, "w").await;
    run(&relay, "flood", "flood", "w").await;
    let d = diff(&relay, ADMIN, "/api/sessions/flood/diff").await;
    assert_eq!(d["files"].as_array().map(Vec::len), Some(500), "{}", d["truncated"]);
    assert_eq!(d["truncated"], json!("more than 500 files: the first 500 shown"));
    assert_eq!(d["totals"]["files"], json!(502), "the totals are the whole diff's");
    let p = diff(&relay, ADMIN, "/api/sessions/flood/diff?path=big.txt").await;
    let patch = p["patch"].as_str().expect("patch");
    assert!(patch.len() <= 1024 * 1024 && patch.len() > 1000 * 1024, "{}", patch.len());
    assert_eq!(p["truncated"], json!("the patch is longer than 1024 KiB: its first 1024 KiB shown"));

    exec(&relay, "mkdir -p plain").await;
    run(&relay, "plain", "flood", "plain").await;
    let d = diff(&relay, ADMIN, "/api/sessions/plain/diff").await;
    assert_eq!(d["repository"], json!(false), "{d}");
    assert!(d["reason"].as_str().is_some_and(|r| r.contains("in no git repository when turn 1 started")), "{d}");
    assert_eq!(d["files"], json!([]));
    let p = diff(&relay, ADMIN, "/api/sessions/plain/diff?path=big.txt").await;
    assert_eq!((p["repository"].clone(), p["patch"].clone()), (json!(false), json!("")), "{p}");
}

#[tokio::test]
async fn hangar_diff_prints_a_table_a_patch_or_the_relays_json() {
    let state = StateDir::new();
    let relay = relay(&state);
    let base = repo(&relay, "w").await;
    run(&relay, "work", "worker", "w").await;
    let hangar = Hangar::new(&relay, ADMIN);
    // A renamed file's patch asked for first (no summary read yet) is still a rename.
    let renamed = hangar.run(&["diff", "work", "renamed.txt"]).await.ok().stdout;
    assert!(renamed.contains("rename from moved.txt\nrename to renamed.txt"), "{renamed}");
    let table = hangar.run(&["diff", "work"]).await.ok().stdout;
    let lines: Vec<&str> = table.lines().collect();
    let line =
        |start: &str| lines.iter().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{start:?} in {table}"));
    assert!(line(" M f.txt ").ends_with(" +2 -1"), "{table}");
    assert!(line(" A added file.txt ").ends_with(" +1 -0"), "{table}");
    assert!(line(" D gone.txt ").ends_with(" +0 -5"), "{table}");
    assert!(line(" R moved.txt → renamed.txt ").ends_with(" +0 -0"), "{table}");
    assert_eq!(
        lines.last().copied(),
        Some(format!(" 5 files changed, +4 -6 since turn 1 started at {}", &base[..12]).as_str())
    );
    assert!(!table.contains('\x1b'), "no colour off a terminal: {table:?}");

    let patch = hangar.run(&["diff", "work", "f.txt"]).await.ok().stdout;
    assert!(patch.contains("--- a/f.txt\n+++ b/f.txt\n") && patch.contains("\n-b\n+B\n"), "{patch}");
    let v = hangar.run(&["diff", "work", "--json"]).await.ok().json();
    assert_eq!((v["base"].as_str(), v["totals"]["files"].as_u64()), (Some(base.as_str()), Some(5)), "{v}");
    let v = hangar.run(&["diff", "work", "gone.txt", "--turn", "1", "--json"]).await.ok().json();
    assert!(v["patch"].as_str().is_some_and(|p| p.contains("deleted file mode")), "{v}");

    let missing = hangar.run(&["diff", "nope"]).await;
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(missing.stderr.contains("no session \"nope\""), "{missing:?}");
}
