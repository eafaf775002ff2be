//! The real Claude Code in a Docker sandbox made from the agent image (images/agent/build:
//! hangar-envd as root, the CLIs, user `agent` in `/work`), on a Docker network of the test's
//! own (the docker provider's `network` option), where the scripted model
//! (`hangar-model-standin`, images/agent/build-standin) runs in a container of its own: the
//! sandbox reaches the model by name, and does not reach the relay (the control plane).
//!
//! Without Docker or the CLI (scripts/agent-clis) each test prints a skip notice; under `CI=true`
//! it fails instead.
use std::{path::PathBuf, time::Duration};

use hangar_e2e::{
    clis,
    docker::{self, container_of, create_sandbox, inspect, Containers, Network, AGENT_IMAGE, STANDIN_IMAGE},
    relay::{Relay, StateDir, ADMIN},
    sessions::{agent_events, all_events, item_of, put_secret, start, until_ended},
};
use serde_json::{json, Value};

/// A turn of the real CLI in a container: its start and a few model calls.
const LIMIT: Duration = Duration::from_secs(45);
/// The CLI's version the tests pin (scripts/agent-clis).
const CLAUDE_VERSION: &str = "2.1.337";

/// Docker and Claude Code, with the agent images built; `None` when the test must skip.
fn ready(test: &str) -> Option<PathBuf> {
    let claude = clis::or_skip(clis::claude(), "Claude Code")?;
    if !docker::available(test) {
        return None;
    }
    docker::agent_images(&claude);
    Some(claude)
}

/// Runs the stand-in on `net` with `script`, and waits until it listens; its container's name.
fn model_on(net: &mut Network, script: Value) -> String {
    let name = net.run("model", &[STANDIN_IMAGE, &script.to_string()]);
    for _ in 0..100 {
        if docker::docker(&["logs", &name]).stdout.starts_with(b"listening on ") {
            return name;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the stand-in did not start: {:?}", docker::docker(&["logs", &name]));
}

/// Runs `command` in the sandbox as its user; its stdout (exit code 0 expected).
async fn exec(relay: &Relay, sandbox: &str, command: &str) -> String {
    let r = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(json!({"command": command})))
        .await;
    let v = r.json();
    assert_eq!((r.status, &v["exit_code"]), (200, &json!(0)), "{command}: {v}");
    v["stdout"].as_str().unwrap_or_default().to_string()
}

/// A turn that reads a file with a tool, in a repository at the sandbox's work directory: the
/// events a person watching sees, with the uid split (the daemon is root in the container, the
/// agent is not), and afterwards nothing in the repository the agent did not do: the CLI's own
/// state and hangar's are in the agent's home, outside the work directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_claude_code_turn_in_a_docker_sandbox() {
    let Some(_claude) = ready("a_real_claude_code_turn_in_a_docker_sandbox") else { return };
    let mut net = Network::create("turn");
    let model = model_on(
        &mut net,
        json!([{"tool": "Read", "input": {"file_path": "/work/notes.txt"}}, {"text": "The notes say: ship it."}]),
    );
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = agent_sandbox(&relay, &mut containers, &net, &model).await;
    assert_eq!(exec(&relay, &name, "pwd").await, "/work\n", "the image's work directory");
    let body = json!({"name": "dock", "sandbox": name, "harness": "claude-code", "prompt": "What do the notes say?",
        "secrets": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"]});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "dock", LIMIT).await;
    let events = all_events(&relay, ADMIN, "dock").await;
    let ev = agent_events(&events);
    let log = docker::docker(&["logs", &model]);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}\nmodel: {log:?}");
    assert_eq!(s["split"], json!(true), "the daemon is root, the agent is not: {s}");
    assert_eq!(s["cwd"], json!("/work"), "{s}");
    let kinds: Vec<&str> = ev.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run.started", "tool.start", "phase", "tool.end", "message", "usage", "run.result"], "{ev:#?}");
    assert_eq!(ev[0].1["harness_version"], json!(CLAUDE_VERSION), "{:?}", ev[0]);
    assert_eq!((&ev[1].1["name"], &ev[1].1["file"]), (&json!("Read"), &json!("/work/notes.txt")), "{:?}", ev[1]);
    assert_eq!((&ev[3].1["ok"], &ev[3].1["summary"]), (&json!(true), &json!("1\tship it\n2")), "{:?}", ev[3]);
    assert_eq!(ev[4].1["text"], json!("The notes say: ship it."), "{:?}", ev[4]);
    assert_eq!(ev[6].1["ok"], json!(true), "{:?}", ev[6]);
    // The model's two answers went to the agent's loop, from the stand-in's own container.
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    assert_eq!(log.matches(r#""scripted":true"#).count(), 2, "{log}");

    assert_eq!(exec(&relay, &name, "git status --porcelain --ignored").await, "", "nothing the agent did not do");
    assert_eq!(exec(&relay, &name, "cd && pwd").await, "/home/agent\n");
    assert_eq!(
        exec(&relay, &name, "cd && ls -d .claude .claude.json .hangar").await,
        ".claude\n.claude.json\n.hangar\n",
        "the CLI's state and hangar's are in the home"
    );
    drop(relay);
    drop(containers);
}

/// The sandbox of `net` from the agent image, with a repository at its work directory, and
/// Claude Code's secrets for the stand-in `model`; the sandbox's name.
async fn agent_sandbox(relay: &Relay, containers: &mut Containers, net: &Network, model: &str) -> String {
    let name = containers.name("agent");
    let sbx = create_sandbox(relay, &name, json!({"image": AGENT_IMAGE, "network": net.name})).await;
    assert_eq!(sbx["daemon"], json!(true), "{sbx}");
    exec(
        relay,
        &name,
        "git init -q -b main && echo 'ship it' > notes.txt && git add notes.txt && \
         git -c user.email=a@example.com -c user.name=dev commit -q -m notes",
    )
    .await;
    put_secret(relay, "ANTHROPIC_API_KEY", "sk-ant-stand-in-key").await;
    put_secret(relay, "ANTHROPIC_BASE_URL", &format!("http://{model}:8080")).await;
    put_secret(relay, "CLAUDE_CODE_MAX_RETRIES", "00000001").await;
    name
}

/// An approval in a container: the real `PreToolUse` hook there holds the call, the relay's
/// inbox watcher finds the request in the sandbox, and the person's answer reaches the hook:
/// the allowed call runs, the denied one does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_reach_a_claude_code_in_a_docker_sandbox() {
    let Some(_claude) = ready("approvals_reach_a_claude_code_in_a_docker_sandbox") else { return };
    let mut net = Network::create("gate");
    let model = model_on(
        &mut net,
        json!([{"bash": "echo yes > allowed.txt"}, {"bash": "echo no > denied.txt"}, {"text": "One of two."}]),
    );
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = agent_sandbox(&relay, &mut containers, &net, &model).await;
    let body = json!({"name": "gated", "sandbox": name, "harness": "claude-code", "prompt": "Write both.",
        "secrets": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"], "approvals": ["Bash"]});
    start(&relay, ADMIN, body).await;
    for (decision, command) in [("allow", "echo yes > allowed.txt"), ("deny", "echo no > denied.txt")] {
        let held = item_of(&relay, ADMIN, "approval", "gated").await;
        assert_eq!(held["tool"]["input"]["command"], json!(command), "{held}");
        let path = format!("/api/approvals/{}", held["ask_id"].as_str().expect("ask_id"));
        let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": decision}))).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let s = until_ended(&relay, ADMIN, "gated", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "gated").await);
    assert_eq!((&s["state"], &s["split"]), (&json!("succeeded"), &json!(true)), "{s}\nevents: {ev:#?}");
    assert_eq!(exec(&relay, &name, "ls").await, "allowed.txt\nnotes.txt\n", "only the allowed call ran");
    drop(relay);
    drop(containers);
}

/// The real Codex in the same image: a command, its output to the model, the answer; Codex's
/// own state (`~/.codex`) in the agent's home, the repository clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_codex_turn_in_a_docker_sandbox() {
    let Some(_claude) = ready("a_real_codex_turn_in_a_docker_sandbox") else { return };
    let mut net = Network::create("codex");
    let model = model_on(
        &mut net,
        json!([{"tool": "exec_command", "input": {"cmd": "cat notes.txt"}}, {"text": "The notes say: ship it."}]),
    );
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = agent_sandbox(&relay, &mut containers, &net, &model).await;
    exec(&relay, &name, &clis::codex_config_command(&format!("http://{model}:8080/v1"), "never")).await;
    put_secret(&relay, "OPENAI_API_KEY", "sk-stand-in-key").await;
    let body = json!({"name": "cx", "sandbox": name, "harness": "codex", "prompt": "What do the notes say?",
        "secrets": ["OPENAI_API_KEY"]});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "cx", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "cx").await);
    assert_eq!((&s["state"], &s["split"]), (&json!("succeeded"), &json!(true)), "{s}\nevents: {ev:#?}");
    let kinds: Vec<&str> = ev.iter().map(|(k, _)| k.as_str()).filter(|k| *k != "harness.unknown").collect();
    assert_eq!(kinds.first(), Some(&"run.started"), "{ev:#?}");
    assert!(kinds.contains(&"tool.start") && kinds.contains(&"tool.end"), "{ev:#?}");
    let message = ev.iter().rfind(|(k, _)| k == "message").expect("a message");
    assert_eq!(message.1["text"], json!("The notes say: ship it."), "{ev:#?}");
    assert_eq!(exec(&relay, &name, "git status --porcelain --ignored").await, "", "nothing the agent did not do");
    assert_eq!(exec(&relay, &name, "cd && ls -d .codex .hangar").await, ".codex\n.hangar\n");
    drop(relay);
    drop(containers);
}

/// The `network` option: the container is on that network alone, and the relay still reaches
/// its daemon there. From inside, the model's container answers by name, and the relay's port
/// does not, at the network's gateway (the Docker host) or any address of the host: the sandbox
/// cannot reach the control plane. A network that does not exist, or `host`, is the client's
/// error, and no container is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_reaches_the_model_and_not_the_relay() {
    let Some(_claude) = ready("the_sandbox_reaches_the_model_and_not_the_relay") else { return };
    let mut net = Network::create("reach");
    let model = model_on(&mut net, json!([{"text": "hi"}]));
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = containers.name("reach");
    let sbx = create_sandbox(&relay, &name, json!({"image": AGENT_IMAGE, "network": net.name})).await;
    assert_eq!(sbx["daemon"], json!(true), "reached on its network: {sbx}");
    let c = container_of(sbx["id"].as_str().expect("id"));
    assert_eq!(inspect(&c, "{{.HostConfig.NetworkMode}}"), net.name);
    assert_eq!(inspect(&c, "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}").trim(), net.name);

    let port = relay.addr.port();
    let gateway = net.gateway();
    assert!(gateway.parse::<std::net::Ipv4Addr>().is_ok(), "the network's gateway: {gateway:?}");
    let mut targets = vec![format!("{model}/8080"), format!("{gateway}/{port}")];
    targets.extend(host_addresses().into_iter().map(|a| format!("{a}/{port}")));
    targets.push(format!("127.0.0.1/{port}"));
    let probe = format!(
        "for t in {}; do if timeout 3 bash -c \"exec 3<>/dev/tcp/$t\" 2>/dev/null; then echo \"open $t\"; \
         else echo \"closed $t\"; fi; done",
        targets.join(" ")
    );
    let out = exec(&relay, &name, &probe).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), targets.len(), "{out}");
    assert_eq!(lines[0], format!("open {model}/8080"), "the model, by name: {out}");
    for line in &lines[1..] {
        assert!(line.starts_with("closed "), "the relay's port is reachable from the sandbox: {line}\n{out}");
    }

    // Never made, never guessed: a missing network and `host` are 400s naming them.
    let missing = format!("{}-missing", net.name);
    for (network, says) in [(missing.as_str(), "is not on the Docker host"), ("host", "not allowed")] {
        let bad = containers.name("bad");
        let body = json!({"name": bad, "provider": "docker", "options": {"image": AGENT_IMAGE, "network": network}});
        let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
        assert_eq!(r.status, 400, "{r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(network) && message.contains(says), "{message}");
        assert!(Containers::of_name(&bad).is_empty(), "no container for {bad}");
    }
    drop(relay);
    drop(containers);
}

/// Every IPv4 address of this machine but loopback's (getifaddrs).
fn host_addresses() -> Vec<String> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, which is walked read-only and freed once below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() {
                out.push(ip.to_string());
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}
