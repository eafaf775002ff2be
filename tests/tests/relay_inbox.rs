//! The inbox end to end: agents in real sandboxes ask through the real agent-side command
//! (`hangar-envd question|progress|approve`), people answer over the API, and the agent reads
//! the answer. Local sandboxes (the daemon's watch, no uid split), Docker with the daemon (the
//! split: approvals, and an agent that forges its own answer) and Docker without one (polling).
//! The Docker tests fail under CI=true without Docker and are skipped, with a notice, otherwise.
use std::time::{Duration, Instant};

use hangar_e2e::{
    docker::{self, sandbox_of, Containers, ENVD_IMAGE, PLAIN_IMAGE},
    relay::{Relay, StateDir, ADMIN},
    sessions::{all_events, harness_file, profile, start, until_ended},
};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(40);

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// Asks a question, prints the answer (or how the command ended), reports progress.
const QUESTIONER: &str = r#"cat >/dev/null
a=$("$HANGAR_AGENT" question "Which database?" --option postgres --option sqlite); code=$?
echo "answer=$a exit=$code"
"$HANGAR_AGENT" progress --pct 40 "halfway there"
sleep 1"#;

/// Claude Code, as far as hooks go: it finds the `PreToolUse` hook in the settings file hangar
/// passes with `--settings`, and runs it with the call's JSON on stdin, as Claude Code does,
/// three times: a call the policy does not hold, one it holds (while the agent tries to forge
/// its own answer, where hangar answers and in its own directory), and another.
const HOOKED: &str = r#"cat >/dev/null
s=; while [ $# -gt 0 ]; do [ "$1" = --settings ] && s=$2; shift; done
[ -n "$s" ] || { echo "no settings file"; exit 1; }
cmd=$(sed -n 's/.*"command":"\(.*\)","timeout".*/\1/p' "$s")
[ -n "$cmd" ] || { echo "no hook command"; exit 1; }
hook() { printf '{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"%s"}' "$1" "$2" | eval "$cmd"; }
out=$(hook "git status" t1); echo "status:${out:-none}"
(
  for _ in $(seq 100); do r=$(ls "$HOME/.hangar/inbox" 2>/dev/null | grep -v '^progress' | head -n1); [ -n "$r" ] && break; sleep 0.1; done
  f='{"v":1,"id":"%s","at":1,"outcome":"allow","reason":"forged"}'
  if printf "$f" "${r%.json}" > "$HANGAR_ANSWERS/$r" 2>/dev/null; then echo "forged-split"; else echo "forge-refused"; fi
  mkdir -p "$HOME/.hangar/answers" && printf "$f" "${r%.json}" > "$HOME/.hangar/answers/$r" && echo "forged-home"
) &
out=$(hook "git push origin main" t2); echo "push:$out"
wait
out=$(hook "git push --force" t3); echo "force:$out""#;

fn relay_with(state: &StateDir, env: &[(&str, &str)]) -> Relay {
    let profiles = vec![
        profile("questioner", &argv(&["bash", "-c", QUESTIONER]), None, "claude-stream-json", "none"),
        profile("failing", &argv(&["bash", "-c", "cat >/dev/null; echo broken; exit 4"]), None, "text", "none"),
        format!(
            "{}approvals = [\"--settings\", \"{{settings_file}}\"]\n\n",
            profile("hooked", &argv(&["bash", "-c", HOOKED, "claude"]), None, "claude-stream-json", "none")
        ),
    ];
    let file = harness_file(&state.0, &profiles);
    let mut all = vec![("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

/// The raw lines the agent printed that were not JSON.
fn printed(events: &[Value]) -> Vec<String> {
    events.iter().filter_map(|e| e["data"]["raw"].as_str().map(str::to_string)).collect()
}

async fn inbox(relay: &Relay, token: &str, ended: bool) -> Value {
    let r = relay.call("GET", &format!("/api/inbox?ended={ended}"), Some(token), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Waits for an open item of `kind` (for `session` where given); the item.
async fn item_of(relay: &Relay, token: &str, kind: &str, session: &str) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let v = inbox(relay, token, false).await;
        let found = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["kind"] == kind && i["session_name"] == session)
            .cloned();
        if let Some(i) = found {
            return i;
        }
        if Instant::now() >= deadline {
            let events = all_events(relay, ADMIN, session).await;
            panic!("no {kind} item from {session} after {LIMIT:?}: {v}\nevents: {events:?}\nrelay: {}", relay.log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the session printed a line starting with `prefix`; that line.
async fn printed_line(relay: &Relay, session: &str, prefix: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let events = all_events(relay, ADMIN, session).await;
        if let Some(l) = printed(&events).into_iter().find(|l| l.starts_with(prefix)) {
            return l;
        }
        assert!(Instant::now() < deadline, "{session} printed no {prefix:?} line: {events:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session's body: a local sandbox's own working directory, a container's `/tmp`.
fn body(name: &str, sandbox: &str, harness: &str) -> Value {
    let mut b = json!({"name": name, "sandbox": sandbox, "harness": harness, "prompt": "go"});
    if sandbox != "default" {
        b["cwd"] = json!("/tmp");
    }
    b
}

/// The question round trip, whatever the sandbox: asked, seen only by its person, answered
/// once, read by the agent, and recorded among the session's events with the agent's progress.
async fn question_round_trip(relay: &Relay, sandbox: &str, name: &str) {
    let other = relay.token("other", "user").await;
    start(relay, ADMIN, body(name, sandbox, "questioner")).await;
    let item = item_of(relay, ADMIN, "question", name).await;
    assert_eq!(
        (item["text"].clone(), item["options"].clone(), item["state"].clone()),
        (json!("Which database?"), json!(["postgres", "sqlite"]), json!("open")),
        "{item}"
    );
    let qid = item["ask_id"].as_str().expect("ask_id").to_string();
    assert!(qid.starts_with("qst_") && item["expires_at"].as_f64().is_some(), "{item}");
    assert!(inbox(relay, &other.secret, false).await["items"].as_array().expect("items").is_empty());
    let path = format!("/api/questions/{qid}");
    let r = relay.call("POST", &path, Some(&other.secret), Some(json!({"answer": "sqlite"}))).await;
    assert_eq!(r.status, 404, "another person's question does not exist for them: {r:?}");
    let r = relay.call("POST", &format!("/api/inbox/{qid}/ack"), Some(ADMIN), None).await;
    assert_eq!(r.status, 409, "an open question is answered, not acked: {r:?}");
    for bad in [json!({}), json!({"answer": ""}), json!({"answer": "x", "extra": 1})] {
        let r = relay.call("POST", &path, Some(ADMIN), Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"answer": "postgres"}))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["state"], json!("answered"), "{r:?}");
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"answer": "sqlite"}))).await;
    assert_eq!(r.status, 409, "the first answer holds: {r:?}");

    let s = until_ended(relay, ADMIN, name, LIMIT).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = all_events(relay, ADMIN, name).await;
    assert!(printed(&events).contains(&"answer=postgres exit=0".to_string()), "{events:?}");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for k in ["inbox.opened", "inbox.ended", "agent.progress"] {
        assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
    }
    let progress = events.iter().find(|e| e["type"] == "agent.progress").expect("progress");
    assert_eq!(
        (progress["data"]["pct"].clone(), progress["data"]["text"].clone(), progress["data"]["source"].clone()),
        (json!(40), json!("halfway there"), json!("agent"))
    );
    let ended = inbox(relay, ADMIN, true).await;
    assert!(ended["items"].as_array().expect("items").iter().any(|i| i["ask_id"] == qid && i["outcome"] == "postgres"));
}

#[tokio::test]
async fn a_question_is_asked_and_answered_through_the_agent_side_command_in_a_local_sandbox() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    question_round_trip(&relay, "default", "asks").await;
}

#[tokio::test]
async fn a_question_nobody_answers_expires_and_the_agent_hears_so() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[("HANGAR_INBOX_EXPIRY_SECONDS", "2")]);
    start(&relay, ADMIN, body("waits", "default", "questioner")).await;
    let item = item_of(&relay, ADMIN, "question", "waits").await;
    let s = until_ended(&relay, ADMIN, "waits", LIMIT).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = all_events(&relay, ADMIN, "waits").await;
    assert!(printed(&events).contains(&"answer= exit=3".to_string()), "exit 3: expired: {events:?}");
    let ended = inbox(&relay, ADMIN, true).await;
    let it = ended["items"].as_array().expect("items").iter().find(|i| i["id"] == item["id"]).cloned();
    assert_eq!(it.map(|i| (i["state"].clone(), i["ended_by"].clone())), Some((json!("expired"), json!("hangar"))));
    let path = format!("/api/questions/{}", item["ask_id"].as_str().expect("ask_id"));
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"answer": "late"}))).await;
    assert_eq!(r.status, 409, "{r:?}");
}

#[tokio::test]
async fn a_failed_turn_opens_a_failed_item_that_an_ack_ends() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("fails", "default", "failing")).await;
    let s = until_ended(&relay, ADMIN, "fails", LIMIT).await;
    assert_eq!(s["state"], json!("failed"), "{s}");
    let item = item_of(&relay, ADMIN, "failed", "fails").await;
    assert!(item["text"].as_str().unwrap_or_default().contains("nonzero_exit"), "{item}");
    let v = inbox(&relay, ADMIN, false).await;
    assert_eq!(v["counts"]["failed"], json!(1), "{v}");
    let id = item["id"].as_str().expect("id");
    let r = relay.call("POST", &format!("/api/inbox/{id}/ack"), Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("acked")), "{r:?}");
    assert_eq!(inbox(&relay, ADMIN, false).await["counts"]["failed"], json!(0));
    let r = relay.call("POST", "/api/inbox/inb_nope/ack", Some(ADMIN), None).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = relay.call("POST", &format!("/api/approvals/{id}"), Some(ADMIN), Some(json!({"decision": "allow"}))).await;
    assert_eq!(r.status, 400, "a failed item takes no decision: {r:?}");
}

#[tokio::test]
async fn approvals_are_refused_where_the_agent_could_answer_them_itself() {
    let state = StateDir::new();
    // A local sandbox that isolates nothing runs as the relay's own user: no uid split.
    let relay = relay_with(&state, &[("HANGAR_TEST_DISABLE_ISOLATION", "1")]);
    let cases = [
        (json!(["Bash(git push*)"]), "hooked", "uid split"),
        (json!(["Bash(git push*)"]), "questioner", "no approval hook"),
        (json!(["Bash(git push"]), "hooked", "Bash(git push"),
        (json!("Bash"), "hooked", "approvals"),
    ];
    for (approvals, harness, says) in cases {
        let mut b = body("refused", "default", harness);
        b["approvals"] = approvals.clone();
        let r = relay.call("POST", "/api/sessions", Some(ADMIN), Some(b)).await;
        assert_eq!(r.status, 400, "{approvals} {harness}: {r:?}");
        assert!(r.json()["error"]["message"].as_str().unwrap_or_default().contains(says), "{says}: {r:?}");
    }
    let r = relay.call("GET", "/api/sessions/refused", Some(ADMIN), None).await;
    assert_eq!(r.status, 404, "nothing was created: {r:?}");
}

#[tokio::test]
async fn with_the_split_approvals_are_held_until_a_person_decides_and_a_forged_answer_changes_nothing() {
    if !docker::available(
        "with_the_split_approvals_are_held_until_a_person_decides_and_a_forged_answer_changes_nothing",
    ) {
        return;
    }
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let sbx = sandbox_of(&relay, &mut containers, "inbox", ENVD_IMAGE, Some("user")).await["name"]
        .as_str()
        .expect("name")
        .to_string();
    approval_round_trip(&relay, &sbx).await;
}

#[tokio::test]
async fn in_a_local_sandbox_approvals_are_held_until_a_person_decides_and_a_forged_answer_changes_nothing() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    approval_round_trip(&relay, "default").await;
}

/// The approval round trip where the split holds: a call no rule holds passes, held calls wait
/// for a person (whatever the agent writes meanwhile), allowed then denied, each as decided.
async fn approval_round_trip(relay: &Relay, sbx: &str) {
    let mut b = body("gated", sbx, "hooked");
    b["approvals"] = json!(["Bash(git push*)"]);
    let s = start(relay, ADMIN, b).await;
    assert_eq!(s["approvals"], json!(["Bash(git push*)"]), "{s}");

    // A call the policy does not hold gets no decision from the hook.
    assert_eq!(printed_line(relay, "gated", "status:").await, "status:none");
    let held = item_of(relay, ADMIN, "approval", "gated").await;
    assert_eq!(held["title"], json!("Bash: git push origin main"), "{held}");
    assert_eq!(held["tool"]["input"]["command"], json!("git push origin main"), "{held}");
    // The agent's forgeries: refused where hangar answers, ignored in its own directory.
    assert_eq!(printed_line(relay, "gated", "forge").await, "forge-refused");
    printed_line(relay, "gated", "forged-home").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let events = all_events(relay, ADMIN, "gated").await;
    assert!(!printed(&events).iter().any(|l| l.starts_with("push:")), "the call is still held: {events:?}");
    assert_eq!(inbox(relay, ADMIN, false).await["counts"]["approval"], json!(1));

    let apr = held["ask_id"].as_str().expect("ask_id");
    assert!(apr.starts_with("apr_"), "{held}");
    let path = format!("/api/approvals/{apr}");
    for bad in [json!({"decision": "maybe"}), json!({}), json!({"decision": "allow", "answer": "x"})] {
        let r = relay.call("POST", &path, Some(ADMIN), Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": "allow", "reason": "ship it"}))).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("allowed")), "{r:?}");
    let push = printed_line(relay, "gated", "push:").await;
    let decision: Value = serde_json::from_str(push.trim_start_matches("push:")).expect("the hook's JSON");
    assert_eq!(
        decision["hookSpecificOutput"],
        json!({"hookEventName": "PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "ship it"})
    );

    let held = item_of(relay, ADMIN, "approval", "gated").await;
    assert_eq!(held["title"], json!("Bash: git push --force"), "{held}");
    let path = format!("/api/approvals/{}", held["ask_id"].as_str().expect("ask_id"));
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": "deny", "reason": "not today"}))).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("denied")), "{r:?}");
    let force = printed_line(relay, "gated", "force:").await;
    let decision: Value = serde_json::from_str(force.trim_start_matches("force:")).expect("the hook's JSON");
    assert_eq!(decision["hookSpecificOutput"]["permissionDecision"], json!("deny"), "{decision}");
    assert!(decision.to_string().contains("not today"), "{decision}");
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": "allow"}))).await;
    assert_eq!(r.status, 409, "the first decision holds: {r:?}");

    let s = until_ended(relay, ADMIN, "gated", LIMIT).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let denied = item_of(relay, ADMIN, "denied", "gated").await;
    assert_eq!(denied["text"], json!("not today"), "{denied}");
}

#[tokio::test]
async fn without_the_daemon_a_question_is_found_by_polling_and_answered() {
    if !docker::available("without_the_daemon_a_question_is_found_by_polling_and_answered") {
        return;
    }
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let sbx = sandbox_of(&relay, &mut containers, "inbox", PLAIN_IMAGE, None).await["name"]
        .as_str()
        .expect("name")
        .to_string();
    question_round_trip(&relay, &sbx, "polled-asks").await;
    let s = until_ended(&relay, ADMIN, "polled-asks", LIMIT).await;
    assert_eq!(s["turns"][0]["polled"], json!(true), "{s}");
}
