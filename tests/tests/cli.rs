//! The `hangar` command-line client end to end: the real binary, run as a person would, against
//! the real relay (local sandboxes; harness profiles stand in for the agents). What it prints on
//! stdout and stderr and how it exits: streamed commands with their exit codes, background
//! processes attached and detached, watches, sessions followed across turns and reconnects, jobs,
//! the inbox answered, tokens, errors, `--json` and completions.
use std::time::{Duration, Instant};

use hangar_e2e::{
    cli::{Hangar, Run},
    relay::{Relay, StateDir, ADMIN},
    sessions::{fixture, harness_file, profile, replay_argv},
    STEP,
};
use serde_json::Value;

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// Asks a question through the agent-side command and prints what came back.
const QUESTIONER: &str = r#"cat >/dev/null
a=$("$HANGAR_AGENT" question "Which database?" --option postgres --option sqlite); code=$?
echo "answer=$a exit=$code""#;

/// Claude Code as far as hooks go (see relay_inbox.rs): runs the PreToolUse hook from the settings
/// file hangar passes with `--settings` for one call, and prints its decision.
const HOOKED: &str = r#"cat >/dev/null
s=; while [ $# -gt 0 ]; do [ "$1" = --settings ] && s=$2; shift; done
cmd=$(sed -n 's/.*"command":"\(.*\)","timeout".*/\1/p' "$s")
out=$(printf '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"git push origin main"},"tool_use_id":"t1"}' | eval "$cmd")
echo "push:$out""#;

fn profiles() -> Vec<String> {
    let long = fixture("claude-long-turn.jsonl").to_string_lossy().into_owned();
    let short = fixture("claude-stream-json-executor.jsonl").to_string_lossy().into_owned();
    let slow = fixture("claude-long-turn.jsonl").to_string_lossy().into_owned();
    let result = r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done"}"#;
    let worker = format!(
        "cat >/dev/null; git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m work; echo '{result}'"
    );
    vec![
        profile("replay", &replay_argv(&long, 0.02), Some(&replay_argv(&short, 0.02)), "claude-stream-json", "assign"),
        // About 4 s: long enough for a stream that lives 1.8 s to close under it twice.
        profile("slow", &replay_argv(&slow, 0.1), None, "claude-stream-json", "assign"),
        profile("questioner", &argv(&["bash", "-c", QUESTIONER]), None, "claude-stream-json", "none"),
        profile("failing", &argv(&["bash", "-c", "cat >/dev/null; echo broken; exit 4"]), None, "text", "none"),
        profile("worker", &argv(&["bash", "-c", &worker]), None, "claude-stream-json", "none"),
        profile("sleeper", &argv(&["bash", "-c", "cat >/dev/null; exec sleep 60"]), None, "claude-stream-json", "none"),
        format!(
            "{}approvals = [\"--settings\", \"{{settings_file}}\"]\n\n",
            profile("hooked", &argv(&["bash", "-c", HOOKED, "claude"]), None, "claude-stream-json", "none")
        ),
    ]
}

fn relay_with(state: &StateDir, env: &[(&str, &str)]) -> Relay {
    let file = harness_file(&state.0, &profiles());
    let mut all = vec![("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

/// A relay and `hangar` with its admin token.
fn setup(state: &StateDir) -> (Relay, Hangar) {
    let relay = relay_with(state, &[]);
    let hangar = Hangar::new(&relay, ADMIN);
    (relay, hangar)
}

/// The seqs of `events` lines (`HH:MM:SS  #N  type ...`).
fn seqs(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|s| s.strip_prefix('#')).and_then(|n| n.parse().ok()))
        .collect()
}

/// Polls `hangar inbox --json` until an open item of `kind` from `session`; the item.
async fn inbox_item(hangar: &Hangar, kind: &str, session: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = hangar.run(&["inbox", "--json"]).await.ok().json();
        let found =
            v["items"].as_array().and_then(|i| i.iter().find(|i| i["kind"] == kind && i["session_name"] == session));
        if let Some(i) = found {
            return i.clone();
        }
        assert!(Instant::now() < deadline, "no {kind} item from {session}: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn sandboxes_are_listed_created_and_removed() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let out = hangar.run(&["sandboxes"]).await.ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME ") && lines[0].contains("PROVIDER") && lines[0].contains("CREATED"), "{out}");
    assert!(
        lines.iter().any(|l| l.starts_with("default ") && l.contains(" local ") && l.contains(" running ")),
        "{out}"
    );

    let created =
        hangar.run(&["sandboxes", "create", "cli-box", "--provider", "local", "--share", "ana"]).await.ok().stdout;
    assert!(created.starts_with("created sandbox cli-box (sbx_"), "{created}");
    let v = hangar.run(&["sandboxes", "--json"]).await.ok().json();
    let names: Vec<&str> =
        v["sandboxes"].as_array().expect("sandboxes").iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.contains(&"cli-box") && names.contains(&"default"), "{v}");
    let cli_box = v["sandboxes"].as_array().and_then(|l| l.iter().find(|s| s["name"] == "cli-box")).cloned();
    assert_eq!(cli_box.map(|s| s["shared_with"].clone()), Some(serde_json::json!(["ana"])), "{v}");
    let shared = hangar.run(&["sandboxes", "share", "cli-box", "sean", "*"]).await.ok().stdout;
    assert_eq!(shared, "sandbox cli-box is shared with everyone\n");
    let shared = hangar.run(&["sandboxes", "share", "cli-box"]).await.ok().stdout;
    assert_eq!(shared, "sandbox cli-box is shared with nobody\n");
    let bad = hangar.run(&["sandboxes", "share", "cli-box", "a\u{1}b"]).await;
    assert_eq!(bad.code, Some(1), "{bad:?}");
    assert!(bad.stderr.contains("(invalid_argument, HTTP 400)"), "{bad:?}");

    let again = hangar.run(&["sandboxes", "create", "cli-box"]).await;
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(again.stderr.contains("(already_exists, HTTP 409)"), "{again:?}");

    hangar.run(&["sandboxes", "rm", "cli-box"]).await.ok();
    let out = hangar.run(&["sandboxes", "list"]).await.ok().stdout;
    assert!(!out.contains("cli-box"), "{out}");
}

#[tokio::test]
async fn exec_streams_as_the_command_prints_keeps_stderr_apart_and_exits_with_its_code() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let mut run = hangar.spawn(&["exec", "default", "--", "echo one; sleep 2; echo two; echo oops >&2; exit 3"]);
    run.stdout_until(STEP, "one", |l| l == "one").await;
    // The first line came while the command still sleeps: streamed, not at the end.
    assert!(run.child.try_wait().expect("try_wait").is_none(), "hangar ended before the command did");
    let done = run.finish(STEP).await;
    assert_eq!(done.code, Some(3), "{done:?}");
    assert_eq!(done.stdout, "one\ntwo\n", "{done:?}");
    assert_eq!(done.stderr, "oops\n", "{done:?}");

    // Several words are quoted word by word; one is a command line.
    let r = hangar.run(&["exec", "default", "--", "printf", "%s|", "a b", "it's"]).await.ok();
    assert_eq!(r.stdout, "a b|it's|");
    hangar.run(&["exec", "default", "mkdir -p sub"]).await.ok();
    let r = hangar.run(&["exec", "default", "--cwd", "sub", "--", "pwd"]).await.ok();
    assert!(r.stdout.trim_end().ends_with("/sub"), "{r:?}");

    // Killed at its timeout: no exit code to pass on, so 1, and why.
    let r = hangar.run(&["exec", "default", "--timeout", "1", "--", "sleep 10"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("the command ended without an exit code"), "{r:?}");

    // --json: one line per event, the result last; the exit code is still the command's.
    let r = hangar.run(&["exec", "--json", "default", "--", "echo hi; exit 5"]).await;
    assert_eq!(r.code, Some(5), "{r:?}");
    let events = r.json_lines();
    assert_eq!(events.first().map(|e| e["event"].clone()), Some("stdout".into()), "{r:?}");
    assert_eq!(events[0]["data"]["data"], "hi\n");
    let last = events.last().expect("events");
    assert_eq!((last["event"].as_str(), last["data"]["exit_code"].as_i64()), (Some("result"), Some(5)), "{r:?}");
}

#[tokio::test]
async fn a_background_process_is_started_listed_attached_detached_and_killed() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let cmd = "for i in $(seq 1 300); do echo tick $i; echo err $i >&2; sleep 0.2; done";
    let id = hangar.run(&["start", "default", "--", cmd]).await.ok().stdout.trim().to_string();
    assert!(id.starts_with("p_"), "the id alone: {id:?}");
    let ps = hangar.run(&["ps", "default"]).await.ok().stdout;
    assert!(ps.lines().any(|l| l.starts_with(&id) && l.contains(" running ")), "{ps}");

    // Output written before the attach is replayed from the start, then it goes on live.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut attach = hangar.spawn(&["attach", "default", &id]);
    let first = attach.stdout_until(STEP, "the first", |_| true).await;
    assert_eq!(first, "tick 1", "replayed from the oldest output kept");
    attach.stdout_until(STEP, "tick 12 (printed after the attach)", |l| l == "tick 12").await;
    attach.stderr_until(STEP, "err 12", |l| l == "err 12").await;

    // Ctrl-C detaches: hangar says so and exits 0; the process runs on.
    attach.signal(libc::SIGINT);
    let detached = attach.finish(STEP).await;
    assert_eq!(detached.code, Some(0), "{detached:?}");
    assert!(detached.stderr.contains(&format!("detached from {id}; it keeps running")), "{detached:?}");
    assert!(!detached.stdout.contains("err "), "stderr stays on stderr: {detached:?}");
    let ticks: Vec<&str> = detached.stdout.lines().collect();
    let want: Vec<String> = (1..=ticks.len()).map(|i| format!("tick {i}")).collect();
    assert_eq!(ticks, want, "every line once, in order");
    let ps = hangar.run(&["ps", "--json", "default"]).await.ok().json();
    let p = ps["processes"].as_array().and_then(|p| p.iter().find(|p| p["process_id"] == id.as_str())).cloned();
    assert_eq!(p.map(|p| p["state"].clone()), Some("running".into()), "still running after the detach: {ps}");

    let killed = hangar.run(&["kill", "default", &id]).await.ok();
    assert!(killed.stdout.contains(&format!("stopping {id}")), "{killed:?}");
    // Attached after its end: everything kept, then its end, said on stderr (no exit code: 1).
    let after = hangar.run(&["attach", "default", &id]).await;
    assert_eq!(after.code, Some(1), "{after:?}");
    assert!(after.stdout.starts_with("tick 1\n"), "{after:?}");
    assert!(after.stderr.contains("the process ended without an exit code (status: signal: terminated)"), "{after:?}");

    let r = hangar.run(&["kill", "default", "p_000000000000"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("(not_found, HTTP 404)"), "{r:?}");
}

#[tokio::test]
async fn watch_prints_a_line_per_change() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let mut watch = hangar.spawn(&["watch", "default", "."]);
    watch.stderr_until(STEP, "watching", |l| l.starts_with("hangar: watching . in default")).await;
    hangar.run(&["exec", "default", "touch cli-watched.txt"]).await.ok();
    let line = watch.stdout_until(STEP, "the new file", |l| l.contains("cli-watched.txt")).await;
    assert!(line.contains("  create  cli-watched.txt"), "{line:?}");
    watch.signal(libc::SIGINT);
    watch.finish(STEP).await;

    let r = hangar.run(&["watch", "default", "no/such/dir"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("HTTP 404"), "{r:?}");
}

#[tokio::test]
async fn a_session_is_started_and_followed_across_its_turns() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let prompt = state.0.with_extension("prompt.txt");
    std::fs::write(&prompt, "fix the failing tests").expect("prompt file");
    let prompt = prompt.to_str().expect("path");
    let started = hangar
        .run(&["session", "start", "fix", "--sandbox", "default", "--harness", "replay", "--prompt-file", prompt])
        .await
        .ok();
    assert!(started.stdout.starts_with("session fix (ses_") && started.stdout.contains("turn 1 queued"), "{started:?}");

    let mut events = hangar.spawn(&["events", "fix", "--follow"]);
    let ended = |l: &str| l.contains("run.state") && l.contains("running -> succeeded (ok)");
    events.stdout_until(STEP, "the first turn's end", ended).await;
    for want in [
        "run.started     model claude-sonnet-5",
        "tool.start      Bash: uv run pytest -q tests/",
        "test.result     pytest: 210 passed, 3 failed",
    ] {
        assert!(events.stdout.iter().any(|l| l.contains(want)), "{want:?} in {:#?}", events.stdout);
    }
    let first = events.stdout.len();

    // --follow stays for the next turn.
    let turn = hangar.run(&["session", "prompt", "fix", "and the docs"]).await.ok();
    assert!(turn.stdout.contains("turn 2 queued"), "{turn:?}");
    events.stdout_until(STEP, "the second turn's end", ended).await;
    assert!(events.stdout.len() > first + 2, "{:#?}", events.stdout);
    let all = seqs(&events.stdout);
    assert_eq!(all, (1..=all.len() as i64).collect::<Vec<_>>(), "each event once, in order: {:#?}", events.stdout);
    events.signal(libc::SIGINT);
    events.finish(STEP).await;

    // Without --follow the stream ends with the turn: exit 0; --json is one JSON line per event.
    let r = hangar.run(&["events", "fix", "--json", "--since", "3"]).await.ok();
    let lines = r.json_lines();
    assert_eq!(lines[0]["data"]["seq"], 4, "{r:?}");
    let close = lines.last().expect("lines");
    assert_eq!((close["event"].as_str(), close["data"]["reason"].as_str()), (Some("close"), Some("done")), "{r:?}");

    let list = hangar.run(&["sessions"]).await.ok().stdout;
    assert!(
        list.lines().any(|l| l.starts_with("fix ") && l.contains(" succeeded ") && l.contains(" replay ")),
        "{list}"
    );
    let show = hangar.run(&["session", "show", "fix"]).await.ok().stdout;
    assert!(show.contains("state      succeeded (ok)"), "{show}");
    assert!(show.lines().any(|l| l.starts_with("2 ") && l.contains("and the docs")), "{show}");
    let cancel = hangar.run(&["session", "cancel", "fix"]).await.ok();
    assert!(cancel.stdout.contains("turn 2 succeeded"), "a cancel after the end changes nothing: {cancel:?}");
}

#[tokio::test]
async fn events_reconnect_with_last_event_id_and_miss_or_repeat_nothing() {
    let state = StateDir::new();
    // Every stream lives 1.8 s: the relay closes it (`lifetime`) while the turn runs on.
    let relay = relay_with(&state, &[("HANGAR_STREAM_MAX_HOURS", "0.0005")]);
    let hangar = Hangar::new(&relay, ADMIN);
    hangar.run(&["session", "start", "slow", "--sandbox", "default", "--harness", "slow", "--prompt", "go"]).await.ok();
    let r = hangar.run_within(Duration::from_secs(30), &["events", "slow"]).await.ok();
    let lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
    let all = seqs(&lines);
    assert!(all.len() > 40, "{r:?}");
    assert_eq!(all, (1..=all.len() as i64).collect::<Vec<_>>(), "{r:?}");
    assert!(lines.last().is_some_and(|l| l.contains("-> succeeded")), "{r:?}");
    assert!(r.stderr.contains("the stream closed (lifetime); reconnecting after "), "{r:?}");
}

#[tokio::test]
async fn a_job_is_started_followed_and_shown_with_what_hangar_measured() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let git = "git init -q -b main && git -c user.email=a@b -c user.name=t commit -q --allow-empty -m base";
    hangar.run(&["exec", "default", git]).await.ok();
    let args = [
        "job",
        "start",
        "--sandbox",
        "default",
        "--harness",
        "worker",
        "--prompt",
        "add it",
        "--verify",
        "git log --oneline | wc -l",
    ];
    let id = hangar.run(&args).await.ok().stdout.trim().to_string();
    assert!(id.starts_with("job_"), "the id alone: {id:?}");

    let events = hangar.run(&["job", "events", &id]).await.ok();
    assert!(events.stdout.lines().any(|l| l.contains("job.result") && l.contains("1 commit ahead")), "{events:?}");
    assert!(
        events.stdout.lines().any(|l| l.contains("job.state") && l.contains("verifying -> succeeded (ok)")),
        "{events:?}"
    );

    let show = hangar.run(&["job", &id]).await.ok().stdout;
    for want in [
        "state     succeeded (ok)",
        "branch    main",
        "commits   1 since the base",
        "verify    `git log --oneline | wc -l` exited 0",
    ] {
        assert!(show.contains(want), "{want:?} in\n{show}");
    }
    let v = hangar.run(&["job", &id, "--json"]).await.ok().json();
    assert_eq!((v["state"].as_str(), v["result"]["commits_ahead"].as_i64()), (Some("succeeded"), Some(1)), "{v}");
    let list = hangar.run(&["jobs"]).await.ok().stdout;
    assert!(list.lines().any(|l| l.starts_with(&id) && l.contains(" succeeded ")), "{list}");
    let cancel = hangar.run(&["job", "cancel", &id]).await.ok().stdout;
    assert!(cancel.contains("succeeded (ok)"), "cancelling an ended job changes nothing: {cancel}");
}

#[tokio::test]
async fn an_agents_question_is_answered_with_hangar_answer_and_the_agent_goes_on() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    hangar
        .run(&["session", "start", "pick-db", "--sandbox", "default", "--harness", "questioner", "--prompt", "go"])
        .await
        .ok();
    let item = inbox_item(&hangar, "question", "pick-db").await;
    let id = item["id"].as_str().expect("id").to_string();

    let table = hangar.run(&["inbox"]).await.ok().stdout;
    assert!(table.starts_with("open: 0 approval, 1 question, 0 failed, 0 denied\n"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with(&id)
            && l.contains(" pick-db ")
            && l.ends_with("Which database? [postgres | sqlite]")),
        "{table}"
    );
    // A question is answered, not allowed: the relay says why.
    let wrong = hangar.run(&["allow", &id]).await;
    assert_eq!(wrong.code, Some(1), "{wrong:?}");
    assert!(wrong.stderr.starts_with("hangar: ") && wrong.stderr.contains("(invalid_argument, HTTP 400)"), "{wrong:?}");

    let answered = hangar.run(&["answer", &id, "postgres"]).await.ok().stdout;
    assert_eq!(answered, format!("answered {id} (Which database? [postgres | sqlite]): postgres\n"));
    // The agent read the answer and went on to the end of its turn.
    let events = hangar.run(&["events", "pick-db"]).await.ok().stdout;
    assert!(events.lines().any(|l| l.contains("inbox.opened") && l.contains("Which database?")), "{events}");
    assert!(events.lines().any(|l| l.contains("inbox.ended") && l.contains("answered")), "{events}");
    assert!(events.lines().any(|l| l.contains("harness.unknown") && l.ends_with("answer=postgres exit=0")), "{events}");
    let ended = hangar.run(&["inbox", "--ended"]).await.ok().stdout;
    assert!(ended.lines().any(|l| l.starts_with(&id) && l.contains("answered")), "{ended}");

    // A failed turn is an item to acknowledge.
    hangar
        .run(&["session", "start", "breaks", "--sandbox", "default", "--harness", "failing", "--prompt", "go"])
        .await
        .ok();
    let failed = inbox_item(&hangar, "failed", "breaks").await;
    let fid = failed["id"].as_str().expect("id");
    let acked = hangar.run(&["ack", fid]).await.ok().stdout;
    assert!(acked.starts_with(&format!("acked {fid} ")), "{acked}");
}

#[tokio::test]
async fn a_held_tool_call_is_denied_with_hangar_deny_and_the_agent_is_told_why() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let start = [
        "session",
        "start",
        "gated",
        "--sandbox",
        "default",
        "--harness",
        "hooked",
        "--prompt",
        "go",
        "--approval",
        "Bash(git push*)",
    ];
    hangar.run(&start).await.ok();
    let item = inbox_item(&hangar, "approval", "gated").await;
    let id = item["id"].as_str().expect("id").to_string();
    let table = hangar.run(&["inbox"]).await.ok().stdout;
    assert!(table.lines().any(|l| l.starts_with(&id) && l.contains("Bash: git push origin main")), "{table}");
    let denied = hangar.run(&["deny", &id, "--reason", "not before the review"]).await.ok().stdout;
    assert!(denied.starts_with(&format!("denied {id}")), "{denied}");
    let again = hangar.run(&["allow", &id]).await;
    assert_eq!(again.code, Some(1), "the first decision holds: {again:?}");
    assert!(again.stderr.contains("(already_exists, HTTP 409)"), "{again:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = hangar.run(&["events", "gated"]).await.ok().stdout;
        if let Some(line) = events.lines().find(|l| l.contains("push:")) {
            assert!(line.contains("deny") && line.contains("not before the review"), "{line}");
            break;
        }
        assert!(Instant::now() < deadline, "the agent never heard: {events}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn tokens_are_created_listed_used_and_revoked() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let created = hangar.run(&["tokens", "create", "ci", "--scope", "user", "--person", "ada"]).await.ok().stdout;
    let field = |k: &str| {
        created
            .lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.split_whitespace().next().unwrap_or_default().to_string()))
            .unwrap_or_else(|| panic!("no {k} in {created}"))
    };
    let (id, secret) = (field("id "), field("secret "));
    assert!(id.starts_with("tok_") && secret.starts_with("hgr_"), "{created}");

    let list = hangar.run(&["tokens"]).await.ok().stdout;
    assert!(
        list.lines().any(|l| l.starts_with(&id) && l.contains(" ci ") && l.contains(" user ") && l.contains(" ada ")),
        "{list}"
    );
    assert!(!list.contains(&secret), "a list never shows a secret");
    // The new token works, given with the flag this time.
    let user = hangar.with_token(None);
    user.run(&["--token", &secret, "sandboxes"]).await.ok();

    hangar.run(&["tokens", "revoke", &id]).await.ok();
    let r = user.run(&["--token", &secret, "sandboxes"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("(unauthenticated, HTTP 401)"), "{r:?}");
    assert!(!r.stderr.contains(&secret) && !r.stdout.contains(&secret), "the token is never printed: {r:?}");
    let v = hangar.run(&["tokens", "list", "--json"]).await.ok().json();
    let t = v["tokens"].as_array().and_then(|t| t.iter().find(|t| t["id"] == id.as_str())).cloned();
    assert!(t.is_some_and(|t| t["revoked_at"].is_number()), "{v}");
    let again = hangar.run(&["tokens", "revoke", &id]).await;
    assert_eq!(again.code, Some(1), "{again:?}");
}

#[tokio::test]
async fn errors_say_what_went_wrong_and_exit_1_or_2() {
    let state = StateDir::new();
    let (relay, hangar) = setup(&state);
    let secret = "hgr_not_a_real_token_but_secret";
    let bad = hangar.with_token(Some(secret));
    let r = bad.run(&["sandboxes"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), ""), "{r:?}");
    assert_eq!(r.stderr, "hangar: a valid `Authorization: Bearer <token>` is required (unauthenticated, HTTP 401)\n");
    assert!(!r.stderr.contains(secret));

    let none = hangar.with_token(None).run(&["sandboxes"]).await;
    assert_eq!(none.code, Some(1), "{none:?}");
    assert!(none.stderr.contains("HANGAR_TOKEN"), "{none:?}");

    let r = hangar.run(&["exec", "nope", "--", "true"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert_eq!(r.stderr, "hangar: no sandbox \"nope\" (not_found, HTTP 404)\n");

    // The relay down: the message names the URL and the variable to set.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let down = Hangar { url: format!("http://127.0.0.1:{port}"), token: Some(ADMIN.into()) };
    let r = down.run(&["sandboxes"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains(&format!("http://127.0.0.1:{port}")) && r.stderr.contains("HANGAR_URL"), "{r:?}");
    assert!(r.stderr.contains("connection refused"), "{r:?}");

    // Usage errors are clap's: exit 2.
    for args in [
        &["exec"][..],
        &["nonsense"],
        &["exec", "default", "--timeout", "soon", "--", "true"],
        &["sandboxes", "create", "x", "--option", "novalue"],
    ] {
        let r = hangar.run(args).await;
        assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
        assert!(r.stderr.contains("Usage:") || r.stderr.contains("error:"), "{r:?}");
    }
    // The help never shows the token, even from the environment.
    let help = bad.run(&["--help"]).await.ok();
    assert!(!help.stdout.contains(secret) && help.stdout.contains("HANGAR_TOKEN"), "{help:?}");
    drop(relay);
}

#[tokio::test]
async fn every_reading_command_prints_the_relays_json() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    hangar.run(&["start", "default", "sleep 30"]).await.ok();
    for (args, key) in [
        (&["sandboxes", "--json"][..], "sandboxes"),
        (&["ps", "default", "--json"], "processes"),
        (&["sessions", "--json"], "sessions"),
        (&["jobs", "--json"], "jobs"),
        (&["inbox", "--json"], "items"),
        (&["tokens", "--json"], "tokens"),
    ] {
        let r: Run = hangar.run(args).await.ok();
        assert!(r.json()[key].is_array(), "{args:?}: {r:?}");
        assert_eq!(r.stdout.lines().count(), 1, "one document on one line: {r:?}");
    }
}

#[tokio::test]
async fn completions_print_for_each_shell() {
    // No relay: completions need none.
    let hangar = Hangar { url: "http://127.0.0.1:9".into(), token: None };
    for shell in ["bash", "zsh", "fish"] {
        let r = hangar.run(&["completions", shell]).await.ok();
        for word in ["hangar", "sandboxes", "attach", "session"] {
            assert!(r.stdout.contains(word), "{shell}: no {word}: {}", &r.stdout[..r.stdout.len().min(400)]);
        }
    }
    let r = hangar.run(&["completions", "tcsh"]).await;
    assert_eq!(r.code, Some(2), "{r:?}");
}

// `hangar fleet` over the fleet's routes (GET /api/fleet, /api/fleet/stream; docs/fleet.md): one
// table with `--once`, a table appended for each change otherwise.
#[tokio::test]
async fn fleet_prints_once_and_redraws_as_the_stream_changes() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let once = hangar.run(&["fleet", "--once"]).await.ok().stdout;
    assert!(once.starts_with("fleet at "), "{once}");
    assert!(once.lines().nth(1).is_some_and(|l| l.starts_with("UNIT ") && l.contains(" STATUS ")), "{once}");
    let v = hangar.run(&["fleet", "--once", "--json"]).await.ok().json();
    assert!(v["units"].is_array() && v["counts"].is_object(), "{v}");

    // Not a terminal: each redraw is a table appended, no escape sequences.
    let mut live = hangar.spawn(&["fleet"]);
    live.stdout_until(STEP, "the first table", |l| l.starts_with("fleet at ")).await;
    hangar
        .run(&["session", "start", "busy", "--sandbox", "default", "--harness", "sleeper", "--prompt", "go"])
        .await
        .ok();
    live.stdout_until(STEP, "a redraw", |l| l.starts_with("fleet at ")).await;
    live.stdout_until(STEP, "the busy sandbox", |l| !l.starts_with("fleet at ") && l.contains(" default ")).await;
    assert!(live.stdout.iter().all(|l| !l.contains('\x1b')), "{:#?}", live.stdout);
    live.signal(libc::SIGINT);
    live.finish(STEP).await;

    let mut json = hangar.spawn(&["fleet", "--json"]);
    let first = json.stdout_until(STEP, "the snapshot", |_| true).await;
    let v: Value = serde_json::from_str(&first).expect("a JSON line");
    assert_eq!(v["event"], "snapshot", "{v}");
    json.signal(libc::SIGINT);
    json.finish(STEP).await;
}

/// The sandbox named `name` in `hangar sandboxes --json`.
async fn sandbox_json(hangar: &Hangar, name: &str) -> Value {
    let v = hangar.run(&["sandboxes", "--json"]).await.ok().json();
    v["sandboxes"].as_array().and_then(|l| l.iter().find(|s| s["name"] == name)).cloned().unwrap_or(Value::Null)
}

// References (docs/cli.md, "References"), the new verbs, and `-o`: what a kubectl or gh user types.
#[tokio::test]
async fn prefixes_short_names_and_the_new_verbs_work_and_o_prints_json_wide_or_names() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    hangar.run(&["sandboxes", "create", "refs-one"]).await.ok();
    hangar.run(&["sandboxes", "create", "refs-two"]).await.ok();
    let one = sandbox_json(&hangar, "refs-one").await;
    let (id, short) = (one["id"].as_str().expect("id"), one["short"].as_str().expect("short"));
    assert!(short.starts_with("HGR-") && id.to_ascii_uppercase().ends_with(&short[4..]), "{one}");

    // `get` by a prefix of the id, and by the short name in lower case.
    let got = hangar.run(&["sandboxes", "get", &id[..8]]).await.ok().stdout;
    assert!(got.contains(&format!("id           {id}\n")) && got.contains(&format!("short        {short}\n")), "{got}");
    let by_short = hangar.run(&["sandboxes", "get", &short.to_lowercase(), "-o", "name"]).await.ok().stdout;
    assert_eq!(by_short, format!("{id}\n"));

    // Ambiguous: the relay's 400 names both, exit 1.
    let r = hangar.run(&["sandboxes", "get", "refs"]).await;
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("(ambiguous, HTTP 400)") && r.stderr.contains(id), "{r:?}");

    // -o: json is the relay's own, wide has more columns, name one id per line.
    let json = hangar.run(&["sandboxes", "-o", "json"]).await.ok().json();
    assert_eq!(json, hangar.run(&["sandboxes", "--json"]).await.ok().json());
    let table = hangar.run(&["sandboxes"]).await.ok().stdout;
    let wide = hangar.run(&["sandboxes", "-o", "wide"]).await.ok().stdout;
    assert!(table.starts_with("NAME ") && table.contains(" SHORT ") && !table.contains("WORKDIR"), "{table}");
    assert!(wide.lines().next().is_some_and(|h| h.contains(" SHORT ") && h.ends_with(" WORKDIR")), "{wide}");
    assert!(table.lines().any(|l| l.starts_with("refs-one ") && l.contains(short)), "{table}");
    let names = hangar.run(&["sandboxes", "-o", "name"]).await.ok().stdout;
    let ids: Vec<&str> = names.lines().collect();
    assert!(ids.contains(&id) && ids.iter().all(|l| l.starts_with("sbx_")), "{names}");

    // pause and resume, by the short name.
    let paused = hangar.run(&["sandboxes", "pause", short]).await.ok().stdout;
    assert_eq!(paused, format!("paused sandbox refs-one ({id}): paused\n"));
    assert_eq!(sandbox_json(&hangar, "refs-one").await["state"], "paused");
    let resumed = hangar.run(&["sandboxes", "resume", &id[..10]]).await.ok().stdout;
    assert_eq!(resumed, format!("resumed sandbox refs-one ({id}): running\n"));

    // Sessions: `session rm` by a prefix of the name; `sessions -o name` one id per line.
    let start = ["session", "start", "refs-session", "--sandbox", "default", "--harness", "replay", "--prompt", "go"];
    hangar.run(&start).await.ok();
    let sid = hangar.run(&["session", "show", "refs-s", "-o", "name"]).await.ok().stdout;
    assert!(sid.starts_with("ses_") && sid.ends_with('\n'), "{sid}");
    assert!(hangar.run(&["sessions", "-o", "name"]).await.ok().stdout.lines().any(|l| l == sid.trim()));
    let wide = hangar.run(&["sessions", "-o", "wide"]).await.ok().stdout;
    assert!(wide.lines().next().is_some_and(|h| h.contains(" REASON ") && h.ends_with(" COST")), "{wide}");
    hangar.run(&["session", "rm", &sid.trim()[..8]]).await.ok();
    let r = hangar.run(&["session", "show", sid.trim()]).await;
    assert!(r.code == Some(1) && r.stderr.contains("(not_found, HTTP 404)"), "{r:?}");

    // The fleet names units by their short names, the console's.
    hangar
        .run(&["session", "start", "refs-fleet", "--sandbox", "refs-one", "--harness", "replay", "--prompt", "go"])
        .await
        .ok();
    let fleet = hangar.run(&["fleet", "--once", "--all"]).await.ok().stdout;
    assert!(fleet.lines().nth(1).is_some_and(|l| l.starts_with("UNIT ")), "{fleet}");
    assert!(fleet.lines().any(|l| l.starts_with(short) && l.contains(" refs-one ")), "{fleet}");
    let units = hangar.run(&["fleet", "--once", "--all", "-o", "name"]).await.ok().stdout;
    assert!(units.lines().any(|l| l == short) && units.lines().all(|l| l.starts_with("HGR-")), "{units}");
}

// Exit codes of a followed turn (docs/cli.md, "Errors and exit codes"): 0 succeeded, 3 failed,
// 4 cancelled or timed out.
#[tokio::test]
async fn events_exit_with_how_the_turn_ended() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let start = |name: &'static str, harness: &'static str| {
        ["session", "start", name, "--sandbox", "default", "--harness", harness, "--prompt", "go"]
    };
    hangar.run(&start("ends-well", "replay")).await.ok();
    hangar.run(&start("ends-badly", "failing")).await.ok();
    hangar.run(&start("ends-cancelled", "sleeper")).await.ok();

    let r = hangar.run_within(Duration::from_secs(30), &["events", "ends-well"]).await;
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.lines().any(|l| l.contains("run.state") && l.contains("-> succeeded")), "{r:?}");
    let r = hangar.run_within(Duration::from_secs(30), &["events", "ends-badly"]).await;
    assert_eq!(r.code, Some(3), "{r:?}");
    assert!(r.stdout.lines().any(|l| l.contains("-> failed")), "{r:?}");
    // The same end read as JSON lines exits the same way.
    assert_eq!(hangar.run(&["events", "ends-badly", "--json"]).await.code, Some(3));

    let mut live = hangar.spawn(&["events", "ends-cancelled"]);
    live.stdout_until(STEP, "the turn running", |l| l.contains("-> running")).await;
    hangar.run(&["session", "cancel", "ends-cancelled"]).await.ok();
    let done = live.finish(Duration::from_secs(30)).await;
    assert_eq!(done.code, Some(4), "{done:?}");
}

/// Runs `hangar ARGS` under a pseudo-terminal (util-linux's `script`), so its stdout is a tty;
/// what it printed.
async fn on_a_terminal(hangar: &Hangar, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut line = hangar_e2e::cli::cli_bin().to_string_lossy().into_owned();
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let mut cmd = tokio::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("HANGAR_URL", &hangar.url)
        .env("HANGAR_TOKEN", hangar.token.as_deref().unwrap_or_default())
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = hangar_e2e::within(STEP, "hangar under script", cmd.output())
        .await
        .unwrap_or_else(|e| panic!("running script (util-linux) for a terminal: {e}"));
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// Colour on a terminal only (docs/cli.md, "Colour"): states coloured when stdout is a tty, never
// with NO_COLOR or --color never, nor into a pipe unless --color always.
#[tokio::test]
async fn states_are_coloured_on_a_terminal_unless_no_color() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let green_running = "\x1b[32mrunning\x1b[0m";
    let tty = on_a_terminal(&hangar, &["sandboxes"], &[]).await;
    assert!(tty.contains(green_running), "{tty:?}");
    // The columns stay aligned: the escapes take no room.
    let header = tty.lines().next().expect("header");
    let row = tty.lines().find(|l| l.starts_with("default ")).expect("default's row");
    let at = |l: &str, col: &str| l.find(col).expect("column");
    assert_eq!(at(header, "ISOLATION"), at(&row.replace(green_running, "running"), "namespaces"), "{tty:?}");

    for (args, env) in [(vec!["sandboxes"], vec![("NO_COLOR", "1")]), (vec!["sandboxes", "--color", "never"], vec![])] {
        let plain = on_a_terminal(&hangar, &args, &env).await;
        assert!(plain.contains("running") && !plain.contains('\x1b'), "{args:?} {env:?}: {plain:?}");
    }
    let piped = hangar.run(&["sandboxes"]).await.ok().stdout;
    assert!(!piped.contains('\x1b'), "{piped:?}");
    let forced = hangar.run(&["sandboxes", "--color", "always"]).await.ok().stdout;
    assert!(forced.contains(green_running), "{forced:?}");
}

// `events --until-input` stops, exiting 5, once the turn waits for a person (here a question).
#[tokio::test]
async fn events_until_input_stops_when_the_agent_asks() {
    let state = StateDir::new();
    let (_relay, hangar) = setup(&state);
    let start = ["session", "start", "asks-once", "--sandbox", "default", "--harness", "questioner", "--prompt", "go"];
    hangar.run(&start).await.ok();
    let r = hangar.run_within(Duration::from_secs(30), &["events", "asks-once", "--until-input"]).await;
    assert_eq!(r.code, Some(5), "{r:?}");
    assert!(
        r.stdout.lines().last().is_some_and(|l| l.contains("inbox.opened") || l.contains("-> waiting_input")),
        "{r:?}"
    );
    // Nothing was answered by stopping: the question is still open.
    let item = inbox_item(&hangar, "question", "asks-once").await;
    assert_eq!(item["state"], "open", "{item}");
    let r = hangar.run(&["events", "asks-once", "--until-input", "--follow"]).await;
    assert_eq!(r.code, Some(2), "--until-input and --follow are exclusive: {r:?}");
}
