//! Docker for the tests of the relay's `docker` provider: whether Docker is there (and what a test
//! does when it is not), the test images and the agent images, looking inside containers, and
//! removing every container and network a test made, even when it fails.
//!
//! The rule for a missing Docker: with `CI=true` the test fails; otherwise it prints a `SKIPPED`
//! notice on the test binary's real stderr (not captured, so it shows in `cargo test` output) and
//! returns.
use std::{
    io::Write as _,
    os::fd::AsRawFd as _,
    path::PathBuf,
    process::{Command, Output},
    sync::{
        atomic::{AtomicUsize, Ordering},
        OnceLock,
    },
    time::Instant,
};

use crate::envd_bin;

pub const ENVD_IMAGE: &str = "hangar-test:envd";
pub const PLAIN_IMAGE: &str = "hangar-test:plain";
/// `hangar-test:envd` with its daemon run `--e2b-only`: E2B's protocol alone.
pub const E2B_ENVD_IMAGE: &str = "hangar-test:e2b-envd";

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Runs the docker CLI.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap_or_else(|e| panic!("running docker {args:?}: {e}"))
}

/// Runs the docker CLI; its stdout, trimmed. Fails the test if docker fails.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn docker_answers() -> Result<(), String> {
    match Command::new("docker").args(["version", "--format", "{{.Server.APIVersion}}"]).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("docker version: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("no docker command: {e}")),
    }
}

/// Whether the test can use Docker, with the test images built. Without Docker: fails the test
/// under `CI=true`, else prints a skip notice and returns `false` (the test then returns).
pub fn available(test: &str) -> bool {
    static ANSWERS: OnceLock<Result<(), String>> = OnceLock::new();
    match ANSWERS.get_or_init(docker_answers) {
        Ok(()) => {
            test_images();
            true
        }
        Err(e) if ci() => panic!("{test}: Docker is required when CI=true, and it is not available: {e}"),
        Err(e) => {
            // Straight to the process's stderr: libtest captures only print!/eprint!.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: Docker is not available ({e}); under CI=true this test fails instead"
            );
            false
        }
    }
}

/// Builds the test images once per test process (images/build-test-images is idempotent and
/// fast when they are current), under a file lock so concurrent test binaries never race.
pub fn test_images() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| build_locked("images/build-test-images", &[envd_bin()], &[]));
    if let Err(e) = r {
        panic!("the test images: {e}");
    }
}

/// The agent image (images/agent/build): hangar-envd, the real Claude Code and Codex, user
/// `agent` in `/work`.
pub const AGENT_IMAGE: &str = "hangar-agent:latest";
/// The model stand-in alone in an image (images/agent/build-standin), listening on port 8080.
pub const STANDIN_IMAGE: &str = "hangar-model-standin:latest";

/// Builds [`AGENT_IMAGE`] from this build's hangar-envd and `claude` (the CLI the tests run),
/// and [`STANDIN_IMAGE`] from this build's `hangar-model-standin`, once per test process, under
/// the same lock as the test images. Both scripts are idempotent (a second run: about a second).
pub fn agent_images(claude: &std::path::Path) {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let standin = envd_bin().with_file_name("hangar-model-standin");
        build_locked("images/agent/build", &[envd_bin()], &[("HANGAR_CLAUDE_BIN", claude.as_os_str())])?;
        build_locked("images/agent/build-standin", &[standin], &[])
    });
    if let Err(e) = r {
        panic!("the agent images: {e}");
    }
}

/// Runs an image script of this repository with `args` and `env`, under a file lock so
/// concurrent test binaries never build at once.
fn build_locked(script: &str, args: &[PathBuf], env: &[(&str, &std::ffi::OsStr)]) -> Result<(), String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(script);
    let lock_path = std::env::temp_dir().join("hangar-test-images.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    // SAFETY: flock(2) on a descriptor we own; released when `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!("locking {}: {}", lock_path.display(), std::io::Error::last_os_error()));
    }
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    drop(lock);
    if !out.status.success() {
        return Err(format!(
            "{} failed:\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!("{} in {:?}", String::from_utf8_lossy(&out.stdout).trim(), started.elapsed());
    Ok(())
}

/// A Docker network of the test's own (`docker network create`), removed when it drops with
/// every container still on it, whether the test passed or not. Drop it after the test's
/// [`Containers`] and relay, which remove the sandboxes' containers first.
pub struct Network {
    pub name: String,
    /// Containers the test ran on it itself (`docker run`), removed first.
    own: Vec<String>,
}

impl Network {
    /// A fresh network named after `what` (unique per test process and call).
    pub fn create(what: &str) -> Network {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("hangar-test-{}-{n}-{what}", std::process::id());
        docker_ok(&["network", "create", "--label", "hangar.test=true", &name]);
        Network { name, own: Vec::new() }
    }

    /// `docker run -d --network <it> --name <name> args...` (the name unique per process): the
    /// container's name, which other containers on the network resolve.
    pub fn run(&mut self, what: &str, args: &[&str]) -> String {
        let name = format!("{}-{what}", self.name);
        self.own.push(name.clone());
        let mut all = vec!["run", "-d", "--network", &self.name, "--name", &name];
        all.extend_from_slice(args);
        docker_ok(&all);
        name
    }

    /// The network's gateway: the Docker host's own address on it.
    pub fn gateway(&self) -> String {
        docker_ok(&["network", "inspect", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", &self.name])
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for c in &self.own {
            let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
        }
        // Whatever else is still on it (a sandbox whose guard has not run): removed too.
        let filter = format!("network={}", self.name);
        if let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() {
            for id in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
                let _ = Command::new("docker").args(["rm", "-f", "-v", id]).output();
            }
        }
        let _ = Command::new("docker").args(["network", "rm", &self.name]).output();
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Names a test's sandboxes and removes their containers (by the `hangar.sandbox.name` label)
/// when it drops, whether the test passed or not. Names are unique per test process (they carry
/// its pid), so concurrent test binaries never remove each other's containers.
#[derive(Default)]
pub struct Containers {
    names: Vec<String>,
}

impl Containers {
    pub fn new() -> Containers {
        Containers::default()
    }

    /// A fresh sandbox name (valid for the relay: lowercase, digits and '-').
    pub fn name(&mut self, what: &str) -> String {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("dk{}-{n}-{what}", std::process::id());
        self.names.push(name.clone());
        name
    }

    /// A sandbox name the relay chose (a job's own sandbox), removed like the others.
    pub fn adopt(&mut self, name: &str) {
        self.names.push(name.to_string());
    }

    /// The ids of the containers (running or not) of a sandbox name this guard made.
    pub fn of_name(name: &str) -> Vec<String> {
        let filter = format!("label=hangar.sandbox.name={name}");
        docker_ok(&["ps", "-aq", "--filter", &filter]).lines().map(str::to_string).collect()
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for name in &self.names {
            let filter = format!("label=hangar.sandbox.name={name}");
            let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() else { continue };
            for id in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
                let _ = Command::new("docker").args(["rm", "-f", "-v", id]).output();
            }
        }
    }
}

/// The container of a sandbox, by its `hangar.sandbox` label; fails the test if there is not
/// exactly one.
pub fn container_of(sandbox_id: &str) -> String {
    let filter = format!("label=hangar.sandbox={sandbox_id}");
    let ids = docker_ok(&["ps", "-aq", "--filter", &filter]);
    let ids: Vec<_> = ids.lines().collect();
    assert_eq!(ids.len(), 1, "one container for sandbox {sandbox_id}: {ids:?}");
    ids[0].to_string()
}

/// `docker inspect --format`.
pub fn inspect(container: &str, format: &str) -> String {
    docker_ok(&["inspect", "--format", format, container])
}

/// Pids, inside the container's pid namespace, of the processes whose argv[0] is `argv0`, read
/// from the container's own /proc through `docker exec` (the test images have no ps).
pub fn pids_named(container: &str, argv0: &str) -> Vec<u32> {
    let script = r#"for f in /proc/[0-9]*/cmdline; do
  a=; IFS= read -r -d '' a 2>/dev/null < "$f"
  if [ "$a" = "$1" ]; then p=${f#/proc/}; echo "${p%/cmdline}"; fi
done"#;
    docker_ok(&["exec", container, "bash", "-c", script, "pids", argv0])
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Creates a Docker sandbox `name` with `options` through the relay (as the admin); its JSON.
/// Fails the test unless it is created (201).
pub async fn create_sandbox(relay: &crate::relay::Relay, name: &str, options: serde_json::Value) -> serde_json::Value {
    let body = serde_json::json!({"name": name, "provider": "docker", "options": options});
    let r = relay.call("POST", "/api/sandboxes", Some(crate::relay::ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "creating {name}: {r:?}");
    r.json()
}

/// A Docker sandbox of `image` named by `containers` after `what`, run as `user` where given;
/// its JSON.
pub async fn sandbox_of(
    relay: &crate::relay::Relay,
    containers: &mut Containers,
    what: &str,
    image: &str,
    user: Option<&str>,
) -> serde_json::Value {
    let name = containers.name(what);
    let mut options = serde_json::json!({"image": image});
    if let Some(u) = user {
        options["user"] = serde_json::json!(u);
    }
    create_sandbox(relay, &name, options).await
}
