//! The agent-side commands (`hangar-envd question|progress|approve`, and the binary invoked as
//! `hangar-agent`): the real binary, temporary inbox and answers directories, no daemon. A
//! thread plays the relay: it waits for the request file, checks it, and writes the answer
//! atomically, as the relay does.

use std::{
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use hangar_agents::inbox::{Ask, Request, ToolCall, PROTOCOL};
use hangar_e2e::envd_bin;
use serde_json::{json, Value};

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A turn's directories: `inbox` (made by the command when missing) and `answers` (made here, as
/// hangar does). Removed when dropped.
struct Turn {
    root: PathBuf,
    inbox: PathBuf,
    answers: PathBuf,
}

impl Turn {
    fn new(name: &str) -> Turn {
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("hangar-agent-cli-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let answers = root.join("answers");
        std::fs::create_dir_all(&answers).expect("answers dir");
        Turn { inbox: root.join("inbox"), answers, root }
    }

    /// `hangar-envd <args>` with the environment hangar sets for a turn (and nothing of the
    /// caller's `HANGAR_*`).
    fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_with(&envd_bin(), args)
    }

    fn cmd_with(&self, bin: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(bin);
        c.args(args);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HANGAR_") {
                c.env_remove(k);
            }
        }
        c.env("HANGAR_SESSION", "fix-ci")
            .env("HANGAR_TURN", "turn_7")
            .env("HANGAR_INBOX", &self.inbox)
            .env("HANGAR_ANSWERS", &self.answers)
            .env("HOME", &self.root);
        c
    }

    /// The request files in the inbox (hidden temporary files included).
    fn inbox_files(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(&self.inbox) else { return vec![] };
        let mut names: Vec<String> =
            dir.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// Plays the relay: waits for a question or approval request, checks its file, then writes
    /// `answer(request)` (a JSON object without `v`, `id`, `at`) as the answer. Returns the request.
    fn respond(&self, answer: impl FnOnce(&Value) -> Value + Send + 'static) -> JoinHandle<Value> {
        let (inbox, answers) = (self.inbox.clone(), self.answers.clone());
        std::thread::spawn(move || {
            let (path, req) = wait_for_request(&inbox);
            let mode = std::fs::metadata(&path).expect("request metadata").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "request file mode");
            let dir_mode = std::fs::metadata(&inbox).expect("inbox metadata").permissions().mode();
            assert_eq!(dir_mode & 0o777, 0o700, "inbox mode");
            let id = req["id"].as_str().expect("id").to_string();
            assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(format!("{id}.json").as_str()));
            let mut body = answer(&req);
            // An allow names the call the relay read, as the relay's does (unless the test names one).
            if body["outcome"] == "allow" && body.get("call").is_none() {
                body["call"] = json!(digest_of(&path));
            }
            body["v"] = json!(PROTOCOL);
            body["id"] = json!(id);
            body["at"] = json!(1767225660.0);
            write_answer(&answers, &id, &body.to_string());
            req
        })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The first `<id>.json` in `inbox` (not a progress file, not a temporary file), parsed.
fn wait_for_request(inbox: &Path) -> (PathBuf, Value) {
    let start = Instant::now();
    loop {
        if let Ok(dir) = std::fs::read_dir(inbox) {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".json") && !name.starts_with('.') && !name.starts_with("progress-") {
                    let text = std::fs::read_to_string(entry.path()).expect("read request");
                    let req: Value = serde_json::from_str(&text).expect("request is JSON");
                    return (entry.path(), req);
                }
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no request appeared in {}", inbox.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes an answer file as the relay does: a temporary file, renamed into place.
fn write_answer(answers: &Path, id: &str, body: &str) {
    let tmp = answers.join(format!(".{id}.tmp"));
    std::fs::write(&tmp, body).expect("write answer");
    std::fs::rename(&tmp, answers.join(format!("{id}.json"))).expect("rename answer");
}

fn run(mut cmd: Command, stdin: &[u8]) -> Output {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn hangar-envd");
    let mut input = child.stdin.take().expect("stdin");
    // The command may exit without reading all of it.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

/// The hook's one line of output, parsed: (decision, reason).
fn decision(out: &Output) -> (String, String) {
    assert_eq!(code(out), 0, "stderr: {}", stderr(out));
    let text = stdout(out);
    assert_eq!(text.lines().count(), 1, "one line: {text:?}");
    let v: Value = serde_json::from_str(&text).expect("hook output is JSON");
    let h = &v["hookSpecificOutput"];
    assert_eq!(h["hookEventName"], "PreToolUse");
    (
        h["permissionDecision"].as_str().expect("decision").into(),
        h["permissionDecisionReason"].as_str().expect("reason").into(),
    )
}

/// The digest of the approval's call in the request file at `path`, as the relay reads it.
fn digest_of(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).expect("request file");
    match Request::parse(&bytes).expect("a request").ask {
        Ask::Approval { tool } => tool.digest(),
        other => panic!("not an approval: {other:?}"),
    }
}

fn hook_input(command: &str) -> Vec<u8> {
    json!({
        "session_id": "c0ffee", "transcript_path": "/tmp/t.jsonl", "cwd": "/work", "permission_mode": "default",
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": command, "description": "push it"}, "tool_use_id": "toolu_01"
    })
    .to_string()
    .into_bytes()
}

const PUSH: &[&str] = &["approve", "--policy", "Bash(git push*)", "--timeout", "20"];

#[test]
fn question_is_answered() {
    let turn = Turn::new("answered");
    let relay = turn.respond(|req| {
        assert_eq!(req["kind"], "question");
        assert_eq!(req["text"], "Which branch?");
        assert_eq!(req["options"], json!(["main", "dev"]));
        assert_eq!(req["session"], "fix-ci");
        assert_eq!(req["turn"], "turn_7");
        assert_eq!(req["v"], PROTOCOL);
        assert!(req["created_at"].as_f64().expect("created_at") > 1.7e9);
        json!({"outcome": "answer", "text": "main, please"})
    });
    let out =
        run(turn.cmd(&["question", "Which branch?", "--option", "main", "--option", "dev", "--timeout", "20"]), b"");
    relay.join().expect("relay thread");
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "main, please\n");
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
}

#[test]
fn question_expired_exits_3() {
    let turn = Turn::new("expired");
    let relay = turn.respond(|_| json!({"outcome": "expired", "reason": "nobody answered in 10 minutes"}));
    let out = run(turn.cmd(&["question", "Deploy now?", "--timeout", "20"]), b"");
    relay.join().expect("relay thread");
    assert_eq!(code(&out), 3);
    assert_eq!(stderr(&out), "hangar: the question expired unanswered: nobody answered in 10 minutes\n");
    assert_eq!(stdout(&out), "");
    assert_eq!(turn.inbox_files(), Vec::<String>::new());
}

#[test]
fn question_timeout_exits_4() {
    let turn = Turn::new("timeout");
    let start = Instant::now();
    let out = run(turn.cmd(&["question", "Anyone?", "--timeout", "0.5"]), b"");
    assert_eq!(code(&out), 4);
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert!(stderr(&out).contains("no answer within 0.5 s"), "{}", stderr(&out));
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
}

#[test]
fn question_refusals_write_nothing() {
    let turn = Turn::new("refusals");
    let mut args = vec!["question", "Pick one"];
    for o in ["1", "2", "3", "4", "5", "6"] {
        args.extend(["--option", o]);
    }
    let out = run(turn.cmd(&args), b"");
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("6 options: a question has at most 5"), "{}", stderr(&out));
    let long = "x".repeat(81);
    let out = run(turn.cmd(&["question", "Pick one", "--option", "ok", "--option", &long]), b"");
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("option 2 is 81 characters: an option is at most 80"), "{}", stderr(&out));
    let out = run(turn.cmd(&["question", " "]), b"");
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("a question needs a text"), "{}", stderr(&out));
    assert!(!turn.inbox.exists(), "nothing was written");
}

#[test]
fn question_outside_a_turn_exits_2() {
    let turn = Turn::new("outside");
    let mut cmd = turn.cmd(&["question", "Hello?"]);
    cmd.env_remove("HANGAR_ANSWERS");
    let out = run(cmd, b"");
    assert_eq!(code(&out), 2);
    assert_eq!(stderr(&out), "hangar: not inside a hangar turn (HANGAR_ANSWERS is not set)\n");
    assert!(!turn.inbox.exists());
    // --answers stands for the variable, and must name a directory.
    let missing = turn.root.join("nope");
    let mut cmd = turn.cmd(&["question", "Hello?", "--answers", missing.to_str().expect("path")]);
    cmd.env_remove("HANGAR_ANSWERS");
    let out = run(cmd, b"");
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("is not a directory"), "{}", stderr(&out));
}

#[test]
fn progress_writes_one_file_per_turn() {
    let turn = Turn::new("progress");
    let out = run(turn.cmd(&["progress", "--pct", "40", "tests pass"]), b"");
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(turn.inbox_files(), ["progress-turn_7.json"]);
    let read = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(turn.inbox.join("progress-turn_7.json")).expect("read"))
            .expect("JSON")
    };
    let first = read();
    assert_eq!(
        (&first["kind"], &first["text"], &first["pct"], &first["session"], &first["turn"]),
        (&json!("progress"), &json!("tests pass"), &json!(40), &json!("fix-ci"), &json!("turn_7"))
    );
    let out = run(turn.cmd(&["progress", "pushing"]), b"");
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(turn.inbox_files(), ["progress-turn_7.json"], "overwritten, not added");
    let second = read();
    assert_eq!((&second["text"], &second["pct"]), (&json!("pushing"), &Value::Null));
    assert_ne!(first["id"], second["id"]);
    let out = run(turn.cmd(&["progress", "--pct", "101", "x"]), b"");
    assert_eq!(code(&out), 2);
    // Without HANGAR_INBOX, the inbox is $HOME/.hangar/inbox; and progress needs no answers.
    let mut cmd = turn.cmd(&["progress", "home"]);
    cmd.env_remove("HANGAR_INBOX").env_remove("HANGAR_ANSWERS").env_remove("HANGAR_TURN");
    let out = run(cmd, b"");
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert!(turn.root.join(".hangar/inbox/progress-none.json").is_file());
}

#[test]
fn approve_leaves_calls_no_rule_holds() {
    let turn = Turn::new("no-rule");
    let out = run(turn.cmd(PUSH), &hook_input("git status"));
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(!turn.inbox.exists(), "no request written");
    let mut other_tool = hook_input("git push");
    other_tool = String::from_utf8(other_tool).expect("utf8").replace("\"Bash\"", "\"Write\"").into_bytes();
    let out = run(turn.cmd(PUSH), &other_tool);
    assert_eq!((code(&out), stdout(&out)), (0, String::new()));
}

#[test]
fn approve_allowed() {
    let turn = Turn::new("allow");
    let relay = turn.respond(|req| {
        assert_eq!(req["kind"], "approval");
        assert_eq!(req["tool"]["name"], "Bash");
        assert_eq!(req["tool"]["input"], json!({"command": "git push origin main", "description": "push it"}));
        assert_eq!(req["tool"]["use_id"], "toolu_01");
        assert_eq!((&req["session"], &req["turn"]), (&json!("fix-ci"), &json!("turn_7")));
        json!({"outcome": "allow", "reason": null})
    });
    let out = run(turn.cmd(PUSH), &hook_input("git push origin main"));
    relay.join().expect("relay thread");
    assert_eq!(decision(&out), ("allow".into(), "approved in hangar".into()));
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
}

#[test]
fn approve_denied_with_reason() {
    let turn = Turn::new("deny");
    let relay = turn.respond(|req| {
        // --session and --turn stand for the environment's.
        assert_eq!((&req["session"], &req["turn"]), (&json!("s-flag"), &json!("t-flag")));
        json!({"outcome": "deny", "reason": "not on main"})
    });
    let mut args = PUSH.to_vec();
    args.extend(["--session", "s-flag", "--turn", "t-flag"]);
    let out = run(turn.cmd(&args), &hook_input("git push origin main"));
    relay.join().expect("relay thread");
    assert_eq!(decision(&out), ("deny".into(), "denied in hangar: not on main".into()));
}

#[test]
fn approve_expired_is_denied() {
    let turn = Turn::new("approve-expired");
    let relay = turn.respond(|_| json!({"outcome": "expired", "reason": "no decision in 5 minutes"}));
    let out = run(turn.cmd(PUSH), &hook_input("git push"));
    relay.join().expect("relay thread");
    assert_eq!(decision(&out), ("deny".into(), "nobody approved it in time: no decision in 5 minutes".into()));
}

#[test]
fn approve_fails_closed() {
    let turn = Turn::new("closed");
    // No answers directory: denied, nothing written.
    let missing = turn.root.join("no-answers");
    let mut args = PUSH.to_vec();
    args.extend(["--answers", missing.to_str().expect("path")]);
    let out = run(turn.cmd(&args), &hook_input("git push origin main"));
    let (d, reason) = decision(&out);
    assert_eq!(d, "deny");
    assert!(reason.contains("is not a directory"), "{reason}");
    assert!(!turn.inbox.exists());
    // Not inside a turn at all.
    let mut cmd = turn.cmd(PUSH);
    cmd.env_remove("HANGAR_ANSWERS");
    let (d, reason) = decision(&run(cmd, &hook_input("git push")));
    assert_eq!(d, "deny");
    assert!(reason.contains("HANGAR_ANSWERS is not set"), "{reason}");
    // Garbage on stdin: denied, and never printed back.
    let (d, reason) = decision(&run(turn.cmd(PUSH), b"not json sk-SECRET-123"));
    assert_eq!(d, "deny");
    assert!(reason.contains("not JSON"), "{reason}");
    let out = run(turn.cmd(PUSH), b"{\"tool_input\": {\"command\": \"sk-SECRET-123\"}}");
    assert!(!stdout(&out).contains("SECRET") && !stderr(&out).contains("SECRET"));
    assert_eq!(decision(&out).0, "deny");
    // A policy that does not parse.
    let (d, reason) = decision(&run(turn.cmd(&["approve", "--policy", "Bash("]), &hook_input("ls")));
    assert_eq!(d, "deny");
    assert!(reason.contains("bad approval policy"), "{reason}");
    // Nobody answers in time.
    let (d, reason) =
        decision(&run(turn.cmd(&["approve", "--policy", "Bash", "--timeout", "0.3"]), &hook_input("git push")));
    assert_eq!(d, "deny");
    assert!(reason.contains("no answer within 0.3 s"), "{reason}");
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
    // An inbox that cannot be made (a file is in the way).
    std::fs::write(turn.root.join("file"), "").expect("write");
    let mut cmd = turn.cmd(PUSH);
    cmd.env("HANGAR_INBOX", turn.root.join("file/inbox"));
    let (d, reason) = decision(&run(cmd, &hook_input("git push")));
    assert_eq!(d, "deny");
    assert!(reason.contains("writing"), "{reason}");
}

#[test]
fn approve_ignores_forged_answers() {
    let turn = Turn::new("forged");
    let answers = turn.answers.clone();
    let relay = std::thread::spawn({
        let inbox = turn.inbox.clone();
        move || {
            let (_, req) = wait_for_request(&inbox);
            let id = req["id"].as_str().expect("id").to_string();
            // In the request's answer file: another request's answer, then half an answer.
            let other = json!({"v": PROTOCOL, "id": "aaaaaaaaaaaa", "at": 1.0, "outcome": "allow", "reason": "forged",
                               "call": "00"});
            write_answer(&answers, &id, &other.to_string());
            std::thread::sleep(Duration::from_millis(400));
            write_answer(&answers, &id, &format!("{{\"v\":{PROTOCOL},\"id\":\"{id}\",\"at\":1,\"outcome\":\"all"));
            std::thread::sleep(Duration::from_millis(400));
            let real = json!({"v": PROTOCOL, "id": id, "at": 2.0, "outcome": "deny", "reason": "the real answer"});
            write_answer(&answers, &id, &real.to_string());
        }
    });
    let out = run(turn.cmd(PUSH), &hook_input("git push origin main"));
    relay.join().expect("relay thread");
    assert_eq!(decision(&out), ("deny".into(), "denied in hangar: the real answer".into()));
}

#[test]
fn sigterm_while_waiting_removes_the_request() {
    let turn = Turn::new("sigterm");
    let spawn = |mut cmd: Command| {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().expect("spawn hangar-envd")
    };
    let term = |child: &std::process::Child| {
        wait_for_request(&turn.inbox);
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    };
    // approve: a deny, exit 0 (a death by signal would not block the call).
    let mut child = spawn(turn.cmd(PUSH));
    child.stdin.take().expect("stdin").write_all(&hook_input("git push")).expect("write stdin");
    term(&child);
    let out = child.wait_with_output().expect("wait");
    let (d, reason) = decision(&out);
    assert_eq!(d, "deny");
    assert!(reason.contains("interrupted"), "{reason}");
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
    // question: exit 1.
    let child = spawn(turn.cmd(&["question", "Still there?", "--timeout", "20"]));
    term(&child);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    assert_eq!(turn.inbox_files(), Vec::<String>::new(), "the request is removed");
}

/// A request rewritten after the hook wrote it: the person allowed the call they were shown,
/// `git status`, and the hook, which holds `git push --force`, denies it.
#[test]
fn approve_denies_a_call_other_than_the_one_allowed() {
    let turn = Turn::new("changed");
    let relay = turn.respond(|req| {
        let shown: ToolCall = serde_json::from_value(json!({"name": "Bash", "input": {"command": "git status",
            "description": "push it"}, "use_id": req["tool"]["use_id"]}))
        .expect("a call");
        json!({"outcome": "allow", "reason": "looks harmless", "call": shown.digest()})
    });
    let out = run(turn.cmd(PUSH), &hook_input("git push --force"));
    relay.join().expect("relay thread");
    let (d, reason) = decision(&out);
    assert_eq!(d, "deny", "{reason}");
    assert!(reason.contains("the approval request was changed"), "{reason}");
    assert!(stderr(&out).contains("changed"), "{}", stderr(&out));
}

#[test]
fn approve_cuts_a_large_input_to_fit() {
    let turn = Turn::new("large");
    let relay = turn.respond(|req| {
        assert_eq!(req["tool"]["input"]["file_path"], "src/big.rs");
        let content = req["tool"]["input"]["content"].as_str().expect("content");
        assert!(content.ends_with('…') && content.len() < 10_000, "cut: {} bytes", content.len());
        json!({"outcome": "allow", "reason": "fine"})
    });
    let input = json!({
        "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": {"file_path": "src/big.rs", "content": "x".repeat(300_000)}, "tool_use_id": "toolu_02"
    });
    let out = run(turn.cmd(&["approve", "--policy", "Write", "--timeout", "20"]), input.to_string().as_bytes());
    relay.join().expect("relay thread");
    assert_eq!(decision(&out), ("allow".into(), "fine".into()));
}

#[test]
fn invoked_as_hangar_agent() {
    let turn = Turn::new("symlink");
    let link = turn.root.join("hangar-agent");
    std::os::unix::fs::symlink(envd_bin(), &link).expect("symlink");
    let relay = turn.respond(|req| {
        assert_eq!(req["text"], "Ship it?");
        json!({"outcome": "answer", "text": "yes"})
    });
    let out = run(turn.cmd_with(&link, &["question", "Ship it?", "--timeout", "20"]), b"");
    relay.join().expect("relay thread");
    assert_eq!((code(&out), stdout(&out)), (0, "yes\n".into()), "stderr: {}", stderr(&out));
    let relay = turn.respond(|_| json!({"outcome": "allow", "reason": null}));
    let (d, _) = decision(&run(turn.cmd_with(&link, PUSH), &hook_input("git push")));
    relay.join().expect("relay thread");
    assert_eq!(d, "allow");
    // Under that name the binary is never the daemon: no subcommand is a usage error.
    let out = run(turn.cmd_with(&link, &[]), b"");
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("Usage: hangar-agent"), "{}", stderr(&out));
    let out = run(turn.cmd_with(&link, &["--port", "0"]), b"");
    assert_eq!(code(&out), 2);
    assert!(!stdout(&out).contains("listening"));
    let out = run(turn.cmd_with(&link, &["--help"]), b"");
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("question") && !stdout(&out).contains("--ring-bytes"), "{}", stdout(&out));
}

#[test]
fn daemon_help_is_still_the_daemons() {
    let out = Command::new(envd_bin()).arg("--help").output().expect("run hangar-envd --help");
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    assert!(help.contains("--port") && help.contains("--ring-bytes"), "{help}");
    assert!(help.contains("hangar-envd question TEXT"), "the subcommands are mentioned: {help}");
}
