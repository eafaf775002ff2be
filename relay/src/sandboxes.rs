//! Sandboxes: lookups by id or name, lifecycle through their provider, and their daemons.
use std::{
    collections::HashMap,
    path::{Component, Path, PathBuf},
    sync::Mutex,
    time::Duration,
};

use crate::{
    auth,
    envd::Envd,
    error::ApiError,
    events,
    providers::{ExecOutput, Provider, ProviderError},
    store::{self, SandboxRow, Store},
};

pub const DEFAULT_SANDBOX: &str = "default";

/// Removes `.` and `..` without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

pub struct Sandboxes {
    providers: Vec<Box<dyn Provider>>,
    /// Serializes daemon (re)starts so two requests never start two daemons for one sandbox.
    starting: tokio::sync::Mutex<()>,
    /// The daemon last found for each sandbox (by id), on its open connection. A request asks
    /// it first, with one `Info` call; only when that fails does it take the provider's path
    /// (inspect the container, connect, restart) under `starting`. Without this, every stream
    /// paid for a Docker inspect and a new connection, one request at a time (bench/: 512
    /// streams took 20 s to open).
    found: Mutex<HashMap<String, Envd>>,
}

/// How long a known daemon has to answer `Info` before the provider is asked instead.
const KNOWN_DAEMON_CHECK: Duration = Duration::from_secs(1);

impl From<ProviderError> for ApiError {
    fn from(e: ProviderError) -> Self {
        match e {
            ProviderError::BadOptions(m) => ApiError::bad_request(m),
            // The request names an image that is not there: the client's to fix, like a bad
            // option (404 stays "no such sandbox or route").
            ProviderError::Unsupported(..) | ProviderError::ImageNotFound(_) => ApiError::bad_request(e.to_string()),
            ProviderError::Io { .. }
            | ProviderError::DaemonStart(_)
            | ProviderError::Unreachable(_)
            | ProviderError::Engine(_)
            | ProviderError::Gone(_) => ApiError::bad_gateway(e.to_string()),
        }
    }
}

/// Sandbox names become parts of URLs and resource names: keep them plain.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

impl Sandboxes {
    pub fn new(providers: Vec<Box<dyn Provider>>) -> Self {
        Self { providers, starting: tokio::sync::Mutex::new(()), found: Mutex::new(HashMap::new()) }
    }

    pub fn provider(&self, name: &str) -> Result<&dyn Provider, ApiError> {
        self.providers.iter().find(|p| p.name() == name).map(|p| p.as_ref()).ok_or_else(|| {
            let known: Vec<_> = self.providers.iter().map(|p| p.name()).collect();
            ApiError::bad_request(format!("unknown provider {name:?}; known: {}", known.join(", ")))
        })
    }

    pub async fn create(
        &self,
        store: &Store,
        name: &str,
        provider: &str,
        options: serde_json::Value,
    ) -> Result<SandboxRow, ApiError> {
        if !valid_name(name) {
            return Err(ApiError::bad_request(format!(
                "sandbox name {name:?}: 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit"
            )));
        }
        let p = self.provider(provider)?;
        if store.sandbox(name)?.is_some() {
            return Err(ApiError::conflict(format!("a sandbox named {name:?} exists")));
        }
        let mut row = SandboxRow {
            id: format!("sbx_{}", auth::random_hex(8)),
            name: name.to_string(),
            provider: provider.to_string(),
            options,
            state: "running".into(),
            workdir: None,
            envd_url: None,
            envd_token: None,
            envd_pid: None,
            daemon: false,
            created_at: store::now(),
        };
        {
            let _g = self.starting.lock().await;
            p.create(&mut row).await?;
        }
        if let Err(e) = store.insert_sandbox(&row) {
            let _ = p.destroy(&row).await;
            return Err(e.into());
        }
        events::SandboxChanged { name, provider, change: "created" }.emit();
        Ok(row)
    }

    pub fn get(&self, store: &Store, reference: &str) -> Result<SandboxRow, ApiError> {
        store.sandbox(reference)?.ok_or_else(|| ApiError::not_found(format!("no sandbox {reference:?}")))
    }

    /// A path a client names (a watch's directory, a command's `cwd`). In a local sandbox it must stay inside the sandbox's directory: relative
    /// paths are taken from its working directory, and neither `..` nor a symlink may lead out.
    pub fn resolve_path(&self, row: &SandboxRow, path: &str) -> Result<String, ApiError> {
        if path.is_empty() {
            return Err(ApiError::bad_request(
                "path is required: absolute, or relative to the sandbox's working directory",
            ));
        }
        if row.provider != "local" {
            return Ok(path.to_string());
        }
        let work = PathBuf::from(row.workdir.clone().unwrap_or_default());
        let base = work.canonicalize().unwrap_or(work.clone());
        let joined = normalize(&base.join(path));
        let real = joined.canonicalize().unwrap_or(joined.clone());
        if !joined.starts_with(&base) || !real.starts_with(&base) {
            return Err(ApiError::bad_request(format!("path {path:?} leads outside the sandbox's directory")));
        }
        Ok(joined.to_string_lossy().into_owned())
    }

    /// Refuses work in a paused sandbox.
    pub fn runnable(&self, row: &SandboxRow) -> Result<(), ApiError> {
        if row.state == "paused" {
            return Err(ApiError::unavailable(format!("sandbox {:?} is paused: resume it first", row.name)));
        }
        Ok(())
    }

    /// The sandbox's daemon, started again where the provider can; `None` without one.
    pub async fn daemon(&self, store: &Store, row: &mut SandboxRow) -> Result<Option<Envd>, ApiError> {
        self.runnable(row)?;
        if let Some(known) = self.known(&row.id) {
            if known.alive(KNOWN_DAEMON_CHECK).await.is_ok() {
                return Ok(Some(known));
            }
            self.forget(&row.id);
        }
        let p = self.provider(&row.provider)?;
        let _g = self.starting.lock().await;
        // Found by a request that held the lock before this one (this one forgot the old one).
        if let Some(known) = self.known(&row.id) {
            return Ok(Some(known));
        }
        // Another request may have restarted it while this one waited.
        if let Some(fresh) = store.sandbox(&row.id)? {
            *row = fresh;
        }
        let before = row.clone();
        let result = p.daemon(row).await;
        if result.is_err() {
            row.daemon = false;
        }
        if *row != before {
            store.update_sandbox(row)?;
        }
        match &result {
            Ok(Some(envd)) => {
                self.lock_found().insert(row.id.clone(), envd.clone());
            }
            _ => self.forget(&row.id),
        }
        Ok(result?)
    }

    fn lock_found(&self) -> std::sync::MutexGuard<'_, HashMap<String, Envd>> {
        self.found.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known(&self, id: &str) -> Option<Envd> {
        self.lock_found().get(id).cloned()
    }

    /// Drops the daemon known for a sandbox: the next request asks the provider.
    fn forget(&self, id: &str) {
        self.lock_found().remove(id);
    }

    pub async fn exec_fallback(
        &self,
        row: &SandboxRow,
        command: &str,
        cwd: Option<&str>,
        timeout: Duration,
    ) -> Result<ExecOutput, ApiError> {
        if row.state == "paused" {
            return Err(ApiError::unavailable(format!("sandbox {:?} is paused", row.name)));
        }
        Ok(self.provider(&row.provider)?.exec(row, command, cwd, timeout).await?)
    }

    pub async fn set_paused(&self, store: &Store, row: &mut SandboxRow, paused: bool) -> Result<(), ApiError> {
        let p = self.provider(&row.provider)?;
        self.forget(&row.id);
        if paused {
            p.pause(row).await?;
        } else {
            p.resume(row).await?;
        }
        row.state = if paused { "paused" } else { "running" }.into();
        store.update_sandbox(row)?;
        events::SandboxChanged { name: &row.name, provider: &row.provider, change: &row.state }.emit();
        Ok(())
    }

    pub async fn destroy(&self, store: &Store, row: &SandboxRow) -> Result<(), ApiError> {
        self.forget(&row.id);
        self.provider(&row.provider)?.destroy(row).await?;
        store.delete_sandbox(&row.id)?;
        events::SandboxChanged { name: &row.name, provider: &row.provider, change: "destroyed" }.emit();
        Ok(())
    }

    /// The `default` local sandbox exists from the first start, so examples need no set-up.
    pub async fn ensure_default(&self, store: &Store) -> Result<(), ApiError> {
        if store.sandbox(DEFAULT_SANDBOX)?.is_none() {
            self.create(store, DEFAULT_SANDBOX, "local", serde_json::json!({})).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_dot_is_resolved_lexically() {
        assert_eq!(normalize(Path::new("/a/b/../../../etc")), PathBuf::from("/etc"));
        assert_eq!(normalize(Path::new("/a/./b/c/..")), PathBuf::from("/a/b"));
    }
}
