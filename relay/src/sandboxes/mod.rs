//! Sandboxes: lookups by id or name, lifecycle through their provider (closing their streams on
//! pause and destroy), their daemons, and the paths clients name in them. `run`: the one way to run
//! something in a sandbox. (A sandbox that vanished outside hangar is `sessions::gone`'s.)
mod paths;
pub mod run;

use std::{collections::HashMap, path::PathBuf, sync::Arc, sync::Mutex, time::Duration};

use crate::{
    auth::{self, Caller},
    envd::Envd,
    error::{Error, Result},
    events,
    feed::{Change, Feed},
    providers::Provider,
    refs,
    store::{Scope, Store},
    streams::{Reason, Streams},
};

pub use crate::store::{Isolation, SandboxRow, SandboxState};
pub use paths::check as check_path;

pub const DEFAULT_SANDBOX: &str = "default";

/// In a sandbox's `shared_with`: every person (a team's sandbox).
pub const EVERYONE: &str = "*";

/// How long a known daemon has to answer `Info` before the provider is asked instead.
const KNOWN_DAEMON_CHECK: Duration = Duration::from_secs(1);

pub struct Sandboxes {
    store: Arc<Store>,
    streams: Arc<Streams>,
    /// Told of every sandbox created, paused, resumed or destroyed.
    feed: Arc<Feed>,
    providers: Vec<Box<dyn Provider>>,
    /// Serializes daemon (re)starts so two requests never start two daemons for one sandbox.
    starting: tokio::sync::Mutex<()>,
    /// The daemon last found for each sandbox (by id), on its open connection. A request asks
    /// it first, with one `Info` call; only when that fails does it take the provider's path
    /// (inspect the container, connect, restart) under `starting`. Without this, every stream
    /// paid for a Docker inspect and a new connection, one request at a time (bench/: 512
    /// streams took 20 s to open).
    found: Mutex<HashMap<String, Envd>>,
    /// `--allow-unisolated-sandboxes`: any token may use a sandbox that isolates nothing.
    allow_unisolated: bool,
    /// Sandboxes (by id) being destroyed or created: their resource vanishing is hangar's own
    /// doing, not a sandbox gone.
    settling: Mutex<std::collections::HashSet<String>>,
}

/// A sandbox as the API lists it: its row and its short name (`HGR-8AA3`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Named {
    #[serde(flatten)]
    pub row: SandboxRow,
    pub short: String,
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
    pub fn new(
        store: Arc<Store>,
        streams: Arc<Streams>,
        feed: Arc<Feed>,
        providers: Vec<Box<dyn Provider>>,
        allow_unisolated: bool,
    ) -> Self {
        Self {
            store,
            streams,
            feed,
            providers,
            starting: tokio::sync::Mutex::new(()),
            found: Mutex::new(HashMap::new()),
            allow_unisolated,
            settling: Mutex::new(Default::default()),
        }
    }

    fn provider(&self, name: &str) -> Result<&dyn Provider> {
        self.providers.iter().find(|p| p.name() == name).map(|p| p.as_ref()).ok_or_else(|| {
            let known: Vec<_> = self.providers.iter().map(|p| p.name()).collect();
            Error::invalid(format!("unknown provider {name:?}; known: {}", known.join(", ")))
        })
    }

    /// Refuses a provider this relay does not have (as `create` would), before anything is made.
    pub fn check_provider(&self, name: &str) -> Result<()> {
        self.provider(name).map(|_| ())
    }

    /// Creates a sandbox owned by `owner` (the creating caller's person, or a job's; `None` for
    /// the default sandbox), shared with the persons in `shared_with` (checked here).
    pub async fn create(
        &self,
        name: &str,
        provider: &str,
        options: serde_json::Value,
        owner: Option<&str>,
        shared_with: Vec<String>,
    ) -> Result<SandboxRow> {
        if !valid_name(name) {
            return Err(Error::invalid(format!(
                "sandbox name {name:?}: 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit"
            )));
        }
        let shared_with = auth::shared_with(shared_with)?;
        let p = self.provider(provider)?;
        if self.store.sandbox(name).await?.is_some() {
            return Err(Error::Conflict(format!("a sandbox named {name:?} exists")));
        }
        let mut row = SandboxRow {
            owner: owner.map(str::to_string),
            shared_with,
            ..SandboxRow::new(format!("sbx_{}", crate::random::hex(8)), name, provider, options)
        };
        {
            let _g = self.starting.lock().await;
            let _settling = self.settling(&row.id);
            p.create(&mut row).await?;
        }
        if let Err(e) = self.store.insert_sandbox(&row).await {
            if let Err(undo) = p.destroy(&row).await {
                events::CleanupFailed {
                    what: "destroying a sandbox whose row could not be stored",
                    error: &undo.to_string(),
                }
                .emit();
            }
            return Err(e.into());
        }
        if row.daemon {
            // Which daemon it is (recorded by `daemon`); one that stopped answering says so later.
            let _ = self.daemon(&mut row).await;
        }
        events::SandboxChanged { name, provider, change: "created" }.emit();
        self.feed.publish(Change::Sandbox(&row)).await;
        Ok(row)
    }

    /// The sandbox by its exact id or name: the relay's own lookups (drivers, recovery), which
    /// pass ids, never guess by prefix (a name may begin like another sandbox's id).
    pub async fn get(&self, reference: &str) -> Result<SandboxRow> {
        self.store.sandbox(reference).await?.ok_or_else(|| Error::not_found(format!("no sandbox {reference:?}")))
    }

    /// The sandbox a caller's reference names (`refs`: its id or name, a unique prefix of
    /// either, its short name), among every sandbox (any token may read them); where it matches
    /// several, those the caller may use are chosen (and alone listed when still more than one).
    pub async fn find(&self, reference: &str, caller: &Caller) -> Result<SandboxRow> {
        if let Some(row) = self.store.sandbox(reference).await? {
            return Ok(row);
        }
        let pattern = refs::pattern(reference, &["sbx_"], true, true);
        let rows = if pattern.is_empty() { Vec::new() } else { self.store.sandboxes_matching(pattern).await? };
        let mine = |r: &SandboxRow| may_use(r, caller);
        match refs::pick(rows, mine, |r| refs::Candidate { id: r.id.clone(), name: r.name.clone() }) {
            refs::Picked::One(row) => Ok(row),
            refs::Picked::None => Err(Error::not_found(format!("no sandbox {reference:?}"))),
            refs::Picked::Many(candidates) => {
                Err(Error::Ambiguous { what: "sandboxes", reference: reference.to_string(), candidates })
            }
        }
    }

    pub async fn list(&self) -> Result<Vec<SandboxRow>> {
        Ok(self.store.sandboxes().await?)
    }

    /// Every sandbox with its short name, as the fleet names its units (`refs::short_names`
    /// over every sandbox).
    pub async fn list_named(&self) -> Result<Vec<Named>> {
        let rows = self.list().await?;
        let mut shorts = refs::short_names(rows.iter().map(|r| r.id.as_str()))
            .into_iter()
            .map(|(id, short)| (id.to_string(), short))
            .collect::<HashMap<_, _>>();
        Ok(rows.into_iter().map(|row| Named { short: shorts.remove(&row.id).unwrap_or_default(), row }).collect())
    }

    /// `find`, with the sandbox's short name.
    pub async fn find_named(&self, reference: &str, caller: &Caller) -> Result<Named> {
        let row = self.find(reference, caller).await?;
        let ids: Vec<String> = self.list().await?.into_iter().map(|r| r.id).collect();
        let short = refs::short_names(ids.iter().map(String::as_str)).remove(row.id.as_str()).unwrap_or_default();
        Ok(Named { row, short })
    }

    /// A path a client names (a watch's directory), absolute or relative to the sandbox's
    /// working directory. In a local sandbox it must stay inside the sandbox's directory.
    pub fn resolve_path(&self, row: &SandboxRow, path: &str) -> Result<String> {
        match self.local_root(row) {
            Some(root) => {
                let from = row.workdir.as_deref().map(std::path::PathBuf::from).unwrap_or_else(|| root.clone());
                Ok(paths::confine(&root, &from, path)?.to_string_lossy().into_owned())
            }
            None => {
                check_path(path)?;
                Ok(path.to_string())
            }
        }
    }

    /// A command's working directory, which must exist: checked here where the sandbox's files
    /// are on this host, and by the daemon or the provider's exec elsewhere.
    pub fn resolve_cwd(&self, row: &SandboxRow, cwd: &str) -> Result<String> {
        let path = self.resolve_path(row, cwd)?;
        if self.local_root(row).is_some() && !std::path::Path::new(&path).is_dir() {
            return Err(no_such_dir(cwd));
        }
        Ok(path)
    }

    /// Whether the sandbox's files are on the relay's own host.
    pub fn on_host(&self, row: &SandboxRow) -> bool {
        self.local_root(row).is_some()
    }

    /// The host directory a sandbox's paths are confined to, where its files are on this host.
    fn local_root(&self, row: &SandboxRow) -> Option<PathBuf> {
        self.provider(&row.provider).ok()?.host_root(row)
    }

    /// Refuses work in a paused sandbox, and in one that is gone.
    pub fn runnable(&self, row: &SandboxRow) -> Result<()> {
        match row.state {
            SandboxState::Paused => Err(Error::Paused { sandbox: row.name.clone() }),
            SandboxState::Gone => Err(Error::Provider(crate::providers::ProviderError::Gone(format!(
                "sandbox {:?} is gone: what it ran on vanished outside hangar; destroy it",
                row.name
            )))),
            SandboxState::Running => Ok(()),
        }
    }

    /// The sandbox's daemon, started again where the provider can; `None` without one.
    pub async fn daemon(&self, row: &mut SandboxRow) -> Result<Option<Envd>> {
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
        if let Some(fresh) = self.store.sandbox(&row.id).await? {
            *row = fresh;
        }
        let before = row.clone();
        let mut result = p.daemon(row).await;
        if let Ok(Some(envd)) = &result {
            // Which daemon it is decides every path that uses hangar's extensions.
            match envd.kind() {
                Some(kind) => row.daemon_kind = Some(kind),
                None => match envd.alive(KNOWN_DAEMON_CHECK * 3).await {
                    Ok(kind) => row.daemon_kind = Some(kind),
                    Err(e) => result = Err(e.into()),
                },
            }
        }
        if result.is_err() {
            row.daemon = false;
        }
        if *row != before {
            self.store.update_sandbox(row).await?;
        }
        match &result {
            Ok(Some(envd)) => {
                self.lock_found().insert(row.id.clone(), envd.clone());
            }
            _ => self.forget(&row.id),
        }
        Ok(result?)
    }

    /// The daemon, or the error that says `what` needs one.
    pub async fn require_daemon(&self, row: &mut SandboxRow, what: &'static str) -> Result<Envd> {
        self.daemon(row).await?.ok_or_else(|| Error::NeedsDaemon { sandbox: row.name.clone(), what })
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

    /// Pauses or resumes the sandbox; a pause ends its streams first (with `paused`).
    pub async fn set_paused(&self, row: &mut SandboxRow, paused: bool) -> Result<()> {
        let p = self.provider(&row.provider)?;
        if paused {
            self.streams.close_sandbox(&row.id, Reason::Paused);
        }
        self.forget(&row.id);
        if paused {
            p.pause(row).await?;
        } else {
            p.resume(row).await?;
        }
        row.state = if paused { SandboxState::Paused } else { SandboxState::Running };
        self.store.update_sandbox(row).await?;
        self.feed.publish(Change::Sandbox(row)).await;
        events::SandboxChanged { name: &row.name, provider: &row.provider, change: row.state.as_str() }.emit();
        Ok(())
    }

    /// Destroys the sandbox and everything in it; its streams end first (with `destroyed`).
    pub async fn destroy(&self, row: &SandboxRow) -> Result<()> {
        self.streams.close_sandbox(&row.id, Reason::Destroyed);
        self.forget(&row.id);
        let _settling = self.settling(&row.id);
        self.provider(&row.provider)?.destroy(row).await?;
        self.store.delete_sandbox(&row.id).await?;
        self.feed.publish(Change::SandboxGone(row)).await;
        events::SandboxChanged { name: &row.name, provider: &row.provider, change: "destroyed" }.emit();
        Ok(())
    }

    /// The `default` local sandbox exists from the first start, so examples need no set-up.
    pub async fn ensure_default(&self) -> Result<()> {
        if self.store.sandbox(DEFAULT_SANDBOX).await?.is_none() {
            self.create(DEFAULT_SANDBOX, "local", serde_json::json!({}), None, Vec::new()).await?;
        }
        Ok(())
    }
}

// Isolation: who may work inside a sandbox that isolates nothing.
impl Sandboxes {
    /// Refuses a non-admin caller in a sandbox that isolates nothing, unless the operator
    /// allowed it (`--allow-unisolated-sandboxes`). Such a sandbox's commands run as the relay's
    /// own user on the host: they can read the relay's state and environment, so whoever may run
    /// one there is an admin in effect. Called wherever a caller reaches inside a sandbox
    /// (commands, processes, watches); looking at it stays open, and pausing or destroying it
    /// is `manage`'s to decide.
    pub fn check_isolation(&self, row: &SandboxRow, caller: &Caller) -> Result<()> {
        if row.isolation != Isolation::None || caller.scope == Scope::Admin || self.allow_unisolated {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "sandbox {:?} isolates nothing (its commands would run as the relay's own user): only admin tokens may \
             use it, unless the relay runs with --allow-unisolated-sandboxes (HANGAR_ALLOW_UNISOLATED_SANDBOXES=1)",
            row.name
        )))
    }

    /// The sandbox, if the caller may work inside it: the sandbox isolates it (`check_isolation`)
    /// and it is the caller's to use (`check_use`). The one check every caller's way inside
    /// (commands, processes, watches, sessions and their turns, jobs) passes; the relay's own
    /// work (drivers, recovery) uses `get`.
    pub async fn enter(&self, reference: &str, caller: &Caller) -> Result<SandboxRow> {
        let row = self.find(reference, caller).await?;
        self.check_isolation(&row, caller)?;
        check_use(&row, caller)?;
        Ok(row)
    }

    /// The sandbox, if the caller may pause, resume, destroy it or change whom it is shared
    /// with: an admin or its owner, not the persons it is shared with.
    pub async fn manage(&self, reference: &str, caller: &Caller) -> Result<SandboxRow> {
        let row = self.find(reference, caller).await?;
        check_manage(&row, caller)?;
        Ok(row)
    }

    /// Replaces whom the sandbox is shared with (`manage` decides who may); the sandbox as it is
    /// now. A session already running there whose person is no longer in the list is refused
    /// its next turn (turns `enter`).
    pub async fn share(&self, reference: &str, caller: &Caller, shared_with: Vec<String>) -> Result<SandboxRow> {
        let mut row = self.manage(reference, caller).await?;
        let shared_with = auth::shared_with(shared_with)?;
        if !self.store.set_sandbox_shared_with(&row.id, &shared_with).await? {
            return Err(Error::not_found(format!("no sandbox {reference:?}")));
        }
        events::SandboxShared { sandbox: &row.name, by: &caller.token_id, shared_with: &shared_with }.emit();
        row.shared_with = shared_with;
        Ok(row)
    }
}

// Owners: who may use and manage a sandbox.

/// Whether the caller's person is the sandbox's owner.
fn owns(row: &SandboxRow, caller: &Caller) -> bool {
    row.owner.as_deref().is_some_and(|o| o == caller.person)
}

/// Whether the caller may work inside the sandbox as its owner's: an admin, its owner, or a
/// person it is shared with. A sandbox with no owner (`default`, those made before owners were
/// recorded) is the admins' unless shared: its agents run as one user, so whoever works there
/// can read what the others' agents have.
pub fn may_use(row: &SandboxRow, caller: &Caller) -> bool {
    let shared = row.shared_with.iter().any(|p| p == EVERYONE || *p == caller.person);
    caller.scope == Scope::Admin || owns(row, caller) || shared
}

/// Refuses work inside a sandbox to a caller that may not use it (`may_use`).
fn check_use(row: &SandboxRow, caller: &Caller) -> Result<()> {
    if may_use(row, caller) {
        return Ok(());
    }
    refused(row, caller, "use");
    Err(Error::Forbidden(match &row.owner {
        Some(owner) => format!("sandbox {:?} is {owner}'s and not shared with you", row.name),
        None => format!(
            "sandbox {name:?} has no owner: only admins may use it unless an admin shares it \
             (PATCH /api/sandboxes/{name} {{\"shared_with\": [...]}})",
            name = row.name
        ),
    }))
}

/// Refuses pausing, resuming, destroying or sharing a sandbox to a caller that is not an admin
/// or its owner.
fn check_manage(row: &SandboxRow, caller: &Caller) -> Result<()> {
    if caller.scope == Scope::Admin || owns(row, caller) {
        return Ok(());
    }
    refused(row, caller, "manage");
    Err(Error::Forbidden(match &row.owner {
        Some(owner) => format!(
            "sandbox {:?} is {owner}'s: only {owner} or an admin may pause, resume, destroy or share it",
            row.name
        ),
        None => format!("sandbox {:?} has no owner: only admins may pause, resume, destroy or share it", row.name),
    }))
}

fn refused(row: &SandboxRow, caller: &Caller, what: &str) {
    events::SandboxRefused { sandbox: &row.name, token: &caller.token_id, person: &caller.person, what }.emit();
}

/// Holds a sandbox in `Sandboxes::settling` while it lives.
struct Settling<'a> {
    sandboxes: &'a Sandboxes,
    id: String,
}

impl Sandboxes {
    fn settling(&self, id: &str) -> Settling<'_> {
        self.lock_settling().insert(id.to_string());
        Settling { sandboxes: self, id: id.to_string() }
    }

    fn lock_settling(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.settling.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks a sandbox `gone` (its resource vanished outside hangar): its streams end (`gone`)
    /// and the relay forgets its daemon. Returns the row when this changed it; `None` for a
    /// sandbox unknown, being created or destroyed by hangar, or already gone.
    pub(crate) async fn mark_gone(&self, id: &str) -> Result<Option<SandboxRow>> {
        if self.lock_settling().contains(id) {
            return Ok(None);
        }
        // By id only: a sandbox's name may look like another's id.
        let Some(mut row) = self.store.sandbox(id).await?.filter(|r| r.id == id) else { return Ok(None) };
        if row.state == SandboxState::Gone {
            return Ok(None);
        }
        row.state = SandboxState::Gone;
        row.daemon = false;
        self.store.update_sandbox(&row).await?;
        self.streams.close_sandbox(&row.id, Reason::Gone);
        self.forget(&row.id);
        self.feed.publish(Change::Sandbox(&row)).await;
        Ok(Some(row))
    }
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        self.sandboxes.lock_settling().remove(&self.id);
    }
}

fn no_such_dir(cwd: &str) -> Error {
    Error::invalid(format!("cwd {cwd:?} is not an existing directory in the sandbox"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(owner: Option<&str>, shared_with: &[&str]) -> SandboxRow {
        SandboxRow {
            isolation: Isolation::Namespaces,
            daemon: true,
            owner: owner.map(str::to_string),
            shared_with: shared_with.iter().map(|p| p.to_string()).collect(),
            ..SandboxRow::new("sbx_1".into(), "box", "local", serde_json::json!({}))
        }
    }

    fn caller(person: &str, scope: Scope) -> Caller {
        Caller { token_id: format!("tok_{person}"), name: person.into(), scope, person: person.into() }
    }

    #[test]
    fn owners_and_persons_shared_with_use_a_sandbox_and_only_owners_and_admins_manage_it() {
        let (admin, ana, bob) = (caller("root", Scope::Admin), caller("ana", Scope::User), caller("bob", Scope::Mcp));
        let jobs = caller("bob", Scope::Jobs);
        let may = |r: &SandboxRow, c: &Caller| (check_use(r, c).is_ok(), check_manage(r, c).is_ok());

        let anas = row(Some("ana"), &[]);
        assert_eq!(
            [may(&anas, &admin), may(&anas, &ana), may(&anas, &bob)],
            [(true, true), (true, true), (false, false)]
        );
        let shared = row(Some("ana"), &["bob"]);
        assert_eq!([may(&shared, &bob), may(&shared, &jobs)], [(true, false), (true, false)]);
        let team = row(Some("ana"), &["*"]);
        assert_eq!(may(&team, &bob), (true, false));

        let default = row(None, &[]);
        assert_eq!([may(&default, &admin), may(&default, &ana)], [(true, true), (false, false)]);
        let message = check_use(&default, &ana).unwrap_err().to_string();
        assert!(message.contains("has no owner") && message.contains("PATCH /api/sandboxes/box"), "{message}");
        assert_eq!(may(&row(None, &["*"]), &ana), (true, false));
        // An empty person (the relay's own callers') is nobody's owner.
        assert_eq!(may(&row(None, &[]), &caller("", Scope::User)), (false, false));

        let message = check_use(&anas, &bob).unwrap_err().to_string();
        assert!(message.contains(r#"sandbox "box" is ana's and not shared with you"#), "{message}");
        let message = check_manage(&shared, &bob).unwrap_err().to_string();
        assert!(message.contains("only ana or an admin may"), "{message}");
    }
}
