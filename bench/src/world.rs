//! What the scenarios run against, started by the bench and stopped when dropped: a relay on a
//! fresh state directory with its Docker sandboxes, containers of the bench's own, and host
//! daemons (the end-to-end harness's, so there is one way to start each binary).

use std::{net::SocketAddr, time::Duration};

use hangar_e2e::{
    docker::{self, Containers},
    relay::{Relay, StateDir, ADMIN},
    Envd,
};
use serde_json::{json, Value};
use tonic::transport::{Channel, Endpoint};

use crate::error::{fail, Result};

/// The images bench/run builds from the shipped daemon (images/build-test-images with
/// `HANGAR_IMAGE_REPO`, the same variable read here), so the tests' debug images are left alone.
pub fn image(kind: &str) -> String {
    let repo = std::env::var("HANGAR_IMAGE_REPO").unwrap_or_else(|_| "hangar-bench".into());
    format!("{repo}:{kind}")
}

/// The port hangar-envd listens on inside the images.
pub const CONTAINER_ENVD_PORT: u16 = 49983;

/// A relay and the Docker sandboxes made through it.
pub struct RelayWorld {
    // Dropped in this order: the relay, then its state (and local daemons), then the containers.
    pub relay: Relay,
    _state: StateDir,
    containers: Containers,
}

/// A sandbox as the relay described it at creation.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub name: String,
    pub id: String,
}

impl RelayWorld {
    pub fn start(env: &[(&str, &str)]) -> RelayWorld {
        let state = StateDir::new();
        // Relay::start fails loudly if the binary does not come up.
        let relay = Relay::start(&state.0, &[&[("HANGAR_LOG", "warn")], env].concat());
        RelayWorld { relay, _state: state, containers: Containers::new() }
    }

    pub fn addr(&self) -> SocketAddr {
        self.relay.addr
    }

    /// A Docker sandbox from `image`; fails unless its daemon answered exactly when `daemon`.
    pub async fn docker_sandbox(&mut self, what: &str, image: &str, daemon: bool) -> Result<Sandbox> {
        self.docker_sandbox_with(what, json!({ "image": image }), daemon).await
    }

    /// A Docker sandbox with these `options` (`image` among them); fails unless its daemon
    /// answered exactly when `daemon`. The admin makes it shared with every person, since the
    /// scenarios drive it with tokens of persons of their own.
    pub async fn docker_sandbox_with(&mut self, what: &str, options: Value, daemon: bool) -> Result<Sandbox> {
        let image = options["image"].as_str().unwrap_or_default().to_string();
        let name = self.containers.name(what);
        let body = json!({"name": name, "provider": "docker", "options": options, "shared_with": ["*"]});
        let r = self.relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
        let v: Value = r.json();
        if r.status != 201 {
            return Err(fail(format!("creating the {image} sandbox"), format!("{}: {v}", r.status)));
        }
        if v["daemon"].as_bool() != Some(daemon) {
            return Err(fail(format!("the {image} sandbox"), format!("daemon is {} (want {daemon})", v["daemon"])));
        }
        let id = v["id"].as_str().ok_or_else(|| fail("creating a sandbox", "no id"))?.to_string();
        Ok(Sandbox { name, id })
    }
}

/// The container behind a relay sandbox.
pub fn container_of(sandbox: &Sandbox) -> String {
    docker::container_of(&sandbox.id)
}

/// A container of the bench's own (`docker run -d`), removed when dropped.
pub struct Container {
    pub name: String,
}

impl Container {
    pub fn run(image: &str, what: &str) -> Result<Container> {
        let name = format!("hangar-bench-{}-{what}", std::process::id());
        let out = docker::docker(&["run", "-d", "--name", &name, image]);
        if !out.status.success() {
            return Err(fail(format!("docker run {image}"), String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Container { name })
    }

    /// Runs a command in it to the end; its stdout.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        let out = docker::docker(&[&["exec", &self.name][..], args].concat());
        if !out.status.success() {
            return Err(fail(format!("docker exec {args:?}"), String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A gRPC channel to the daemon inside, once it answers.
    pub async fn envd_channel(&self) -> Result<Channel> {
        let ip = docker::inspect(&self.name, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}");
        channel_to(&format!("http://{ip}:{CONTAINER_ENVD_PORT}"), None).await
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker::docker(&["rm", "-f", "-v", &self.name]);
    }
}

/// A gRPC channel to a daemon at `url`, retried for up to 10 s while it starts, accepting HTTP/2
/// frames up to `max_frame` bytes (HTTP/2's default, 16 KiB, if `None`).
pub async fn channel_to(url: &str, max_frame: Option<u32>) -> Result<Channel> {
    let ep = Endpoint::from_shared(url.to_string())
        .map_err(|e| fail(format!("daemon address {url}"), e))?
        .max_frame_size(max_frame);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ep.connect().await {
            Ok(c) => return Ok(c),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(fail(format!("connecting to {url}"), e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A host daemon (`HANGAR_ENVD_BIN`: bench/run names the shipped build), logging only warnings
/// (logging is not what is measured).
pub fn host_envd(args: &[&str]) -> Envd {
    Envd::builder().env("HANGAR_LOG", "warn").args(args).start()
}
