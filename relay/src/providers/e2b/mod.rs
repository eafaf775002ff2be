//! The `e2b` provider: each sandbox is an E2B sandbox (a Firecracker microVM on E2B's hosts)
//! created through E2B's REST API from a template, and reached through its envd, E2B's daemon.
//!
//! - Creating asks for a `secure` sandbox, so E2B gives its envd an access token; the relay keeps
//!   it (the sandbox row's `envd_token`) and sends it as `X-Access-Token`, as for every daemon.
//!   The sandbox carries hangar's metadata `hangar.sandbox=<id>` and `hangar.sandbox.name=<name>`
//!   besides the client's, and E2B's id of it is the row's `provider_ref`.
//! - Its envd is reached at `HANGAR_E2B_ENVD_URL` (by default E2B's own form,
//!   `https://49983-<sandbox id>.<domain>`), with the headers E2B's edge routes by
//!   (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`). Every E2B sandbox has an envd: there is no exec
//!   without it.
//! - Pause and resume are E2B's (a memory snapshot: processes carry on after a resume); destroy
//!   kills it. A sandbox E2B no longer has (killed outside hangar, or ended at its timeout) is
//!   `ProviderError::Gone`.
//! - E2B's errors keep E2B's message as data; a refused API key names no key.
//!
//! Invariant: the API key goes into one header of requests to E2B's API and nowhere else (never a
//! log line, an error or a sandbox). Nothing E2B answers becomes a path or a host without being
//! checked to be a plain id or domain.
mod api;
mod options;
mod settings;

pub use self::settings::{ApiKey, Settings};
use crate::providers::options::bad;
use std::time::Duration;

use self::{
    api::{Api, ApiError, NewSandbox},
    options::{Options, DEFAULT_TIMEOUT_SECONDS},
};
use super::{ExecOutput, Provider, ProviderError};
use crate::{
    envd::Envd,
    events,
    store::{Isolation, SandboxRow},
};

/// The port of E2B's envd in every sandbox.
const ENVD_PORT: &str = "49983";
/// hangar's metadata on the sandbox: its id and name (E2B's `metadata`).
const META_SANDBOX: &str = "hangar.sandbox";
const META_SANDBOX_NAME: &str = "hangar.sandbox.name";
/// How long a new sandbox's envd gets to answer through E2B's edge.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a running sandbox's envd gets when the relay looks for it again.
const FIND_TIMEOUT: Duration = Duration::from_secs(10);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

pub struct E2bProvider {
    api: Api,
    /// `HANGAR_E2B_DOMAIN`: the domain when E2B names none for a sandbox.
    domain: String,
    /// `HANGAR_E2B_ENVD_URL`, with `{port}`, `{sandbox_id}` and `{domain}` to fill in.
    envd_url: String,
}

/// E2B's sandbox ids are short lowercase alphanumerics: anything else never goes into a URL.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|c| c.is_ascii_alphanumeric())
}

fn valid_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 253
        && d.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-')
        && !d.starts_with(['.', '-'])
}

/// E2B's id of the sandbox, as recorded at creation.
fn e2b_id(sandbox: &SandboxRow) -> Result<&str, ProviderError> {
    match sandbox.provider_ref.as_deref() {
        Some(id) if valid_id(id) => Ok(id),
        _ => Err(ProviderError::Engine(format!("sandbox {:?} has no E2B sandbox recorded", sandbox.name))),
    }
}

/// E2B's answer in the provider's terms; `what` says what was being done.
fn provider_error(sandbox: &SandboxRow, what: &str, e: ApiError) -> ProviderError {
    let id = sandbox.provider_ref.as_deref().unwrap_or("?");
    match e {
        ApiError::Status { status: 404, message } => ProviderError::Gone(format!(
            "sandbox {:?} is gone: E2B no longer has its sandbox {id} (killed outside hangar, or ended at its \
             timeout; E2B said: {message}); destroy the sandbox",
            sandbox.name
        )),
        e => service_error(what, e),
    }
}

/// E2B's answer where no sandbox is concerned yet, or a 404 means something else.
fn service_error(what: &str, e: ApiError) -> ProviderError {
    match e {
        ApiError::Status { status: status @ (401 | 403), message } => ProviderError::Engine(format!(
            "{what}: E2B refused the relay's API key ({status}: {message}); the operator must set a valid \
             HANGAR_E2B_API_KEY"
        )),
        ApiError::Status { status: 429, message } => ProviderError::Engine(format!(
            "{what}: E2B is limiting the relay's requests (429: {message}); try again later"
        )),
        ApiError::Status { status: status @ 502..=504, message } => {
            ProviderError::Unreachable(format!("{what}: E2B is unavailable ({status}: {message})"))
        }
        e @ ApiError::Unreachable { .. } => ProviderError::Unreachable(format!("{what}: {e}")),
        e => ProviderError::Engine(format!("{what}: {e}")),
    }
}

/// Asks the daemon until it answers or `limit` passes (at least once).
async fn wait_envd(envd: &Envd, limit: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match envd.alive(HEALTH_TIMEOUT).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

impl E2bProvider {
    /// The provider as the operator configured it; a setting it cannot use is an error at start.
    pub fn new(settings: &Settings) -> Result<E2bProvider, String> {
        let domain = settings.domain.trim().to_string();
        if !valid_domain(&domain) {
            return Err(format!("HANGAR_E2B_DOMAIN {domain:?}: a domain name such as e2b.app"));
        }
        let api_url = settings.api_url.clone().unwrap_or_else(|| format!("https://api.{domain}"));
        let api = Api::new(&api_url, settings.api_key.clone())?;
        let provider = E2bProvider { api, domain, envd_url: settings.envd_url.trim().to_string() };
        let sample = provider.envd_url("i0", None);
        let uri: http::Uri = sample.parse().map_err(|e| format!("HANGAR_E2B_ENVD_URL {:?}: {e}", provider.envd_url))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!("HANGAR_E2B_ENVD_URL {:?}: an http:// or https:// URL with a host", provider.envd_url));
        }
        Ok(provider)
    }

    /// Where the sandbox's envd is reached.
    fn envd_url(&self, id: &str, domain: Option<&str>) -> String {
        let domain = domain.filter(|d| valid_domain(d)).unwrap_or(&self.domain);
        self.envd_url.replace("{port}", ENVD_PORT).replace("{sandbox_id}", id).replace("{domain}", domain)
    }

    /// The sandbox's envd client, with the headers E2B's edge routes by, over Connect on
    /// HTTP/1.1: the edge forwards nothing else.
    fn envd(&self, sandbox: &SandboxRow) -> Result<Envd, ProviderError> {
        let id = e2b_id(sandbox)?;
        let (Some(url), Some(token)) = (sandbox.envd_url.as_deref(), sandbox.envd_token.as_deref()) else {
            return Err(ProviderError::Engine(format!("sandbox {:?} has no envd recorded", sandbox.name)));
        };
        Envd::over_http1(url, token, &[("e2b-sandbox-id", id), ("e2b-sandbox-port", ENVD_PORT)])
            .map_err(|e| ProviderError::Engine(format!("sandbox {:?}: {e}", sandbox.name)))
    }

    /// Takes in what E2B says of the sandbox's envd (its token and domain), when it says it.
    fn learn(
        &self,
        sandbox: &mut SandboxRow,
        token: Option<String>,
        domain: Option<&str>,
    ) -> Result<(), ProviderError> {
        if let Some(t) = token.filter(|t| !t.is_empty()) {
            sandbox.envd_token = Some(t);
        }
        let id = e2b_id(sandbox)?.to_string();
        if domain.is_some() || sandbox.envd_url.is_none() {
            sandbox.envd_url = Some(self.envd_url(&id, domain));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Provider for E2bProvider {
    fn name(&self) -> &'static str {
        "e2b"
    }

    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let opts = Options::parse(&sandbox.options)?;
        let mut metadata = opts.metadata.clone();
        metadata.insert(META_SANDBOX.to_string(), sandbox.id.clone());
        metadata.insert(META_SANDBOX_NAME.to_string(), sandbox.name.clone());
        let new = NewSandbox {
            template_id: &opts.template,
            timeout: opts.timeout_seconds,
            // At its timeout E2B kills the sandbox; hangar then finds it gone.
            auto_pause: false,
            secure: true,
            metadata: &metadata,
            env_vars: &opts.env,
        };
        let created = match self.api.create(&new).await {
            Ok(c) => c,
            // The request's to fix: an unknown template, a timeout beyond the team's plan.
            Err(ApiError::Status { status: status @ (400 | 404), message }) => {
                return Err(bad(format!("template {:?}: E2B refused the sandbox ({status}: {message})", opts.template)))
            }
            Err(e) => return Err(service_error("creating an E2B sandbox", e)),
        };
        if !valid_id(&created.sandbox_id) {
            return Err(ProviderError::Engine(format!(
                "E2B named its new sandbox {:?}, which is not a sandbox id",
                created.sandbox_id.chars().take(80).collect::<String>()
            )));
        }
        let id = created.sandbox_id.clone();
        // From here on a failure kills the E2B sandbox again.
        let ready = async {
            let Some(token) = created.envd_access_token.filter(|t| !t.is_empty()) else {
                return Err(ProviderError::DaemonStart(format!(
                    "E2B gave sandbox {id} no envd access token (its template's envd {} may predate secured \
                     access: rebuild the template)",
                    created.envd_version.as_deref().unwrap_or("of unknown version")
                )));
            };
            sandbox.provider_ref = Some(id.clone());
            sandbox.envd_token = Some(token);
            sandbox.envd_url = Some(self.envd_url(&id, created.domain.as_deref()));
            sandbox.envd_pid = None;
            sandbox.workdir = None;
            sandbox.isolation = Isolation::Vm;
            sandbox.daemon = true;
            let envd = self.envd(sandbox)?;
            wait_envd(&envd, START_TIMEOUT).await.map_err(|why| {
                ProviderError::DaemonStart(format!(
                    "E2B created sandbox {id}, but its envd at {} did not answer within {START_TIMEOUT:?}: {why}",
                    sandbox.envd_url.as_deref().unwrap_or_default()
                ))
            })
        }
        .await;
        if let Err(e) = ready {
            if let Err(undo) = self.api.kill(&id).await {
                events::CleanupFailed {
                    what: "killing an E2B sandbox whose envd did not answer",
                    error: &undo.to_string(),
                }
                .emit();
            }
            sandbox.provider_ref = None;
            sandbox.envd_token = None;
            sandbox.envd_url = None;
            return Err(e);
        }
        events::E2bSandboxCreated { sandbox: &sandbox.name, e2b_sandbox: &id, template: &opts.template }.emit();
        Ok(())
    }

    async fn daemon(&self, sandbox: &mut SandboxRow) -> Result<Option<Envd>, ProviderError> {
        let id = e2b_id(sandbox)?.to_string();
        let detail = self.api.get(&id).await.map_err(|e| provider_error(sandbox, "looking up the E2B sandbox", e))?;
        match detail.state.as_str() {
            "running" => {}
            "paused" => {
                return Err(ProviderError::Engine(format!(
                    "sandbox {:?}: E2B has its sandbox {id} paused (outside hangar); resume the sandbox",
                    sandbox.name
                )))
            }
            other => {
                return Err(ProviderError::Engine(format!(
                    "sandbox {:?}: E2B says its sandbox {id} is {:?}",
                    sandbox.name,
                    other.chars().take(40).collect::<String>()
                )))
            }
        }
        self.learn(sandbox, detail.envd_access_token, detail.domain.as_deref())?;
        let envd = self.envd(sandbox)?;
        match wait_envd(&envd, FIND_TIMEOUT).await {
            Ok(()) => {
                sandbox.daemon = true;
                Ok(Some(envd))
            }
            Err(why) => Err(ProviderError::DaemonStart(format!(
                "sandbox {:?}: E2B says its sandbox {id} is running, but its envd at {} does not answer: {why}",
                sandbox.name,
                sandbox.envd_url.as_deref().unwrap_or_default()
            ))),
        }
    }

    async fn pause(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let id = e2b_id(sandbox)?.to_string();
        match self.api.pause(&id).await {
            Ok(()) => Ok(()),
            // Paused already, or changing state: E2B's record says which.
            Err(e) if e.status() == Some(409) => match self.api.get(&id).await {
                Ok(d) if d.state == "paused" => Ok(()),
                _ => Err(provider_error(sandbox, "pausing the E2B sandbox", e)),
            },
            Err(e) => Err(provider_error(sandbox, "pausing the E2B sandbox", e)),
        }
    }

    async fn resume(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let id = e2b_id(sandbox)?.to_string();
        let timeout = Options::parse(&sandbox.options).map_or(DEFAULT_TIMEOUT_SECONDS, |o| o.timeout_seconds);
        let resumed =
            self.api.connect(&id, timeout).await.map_err(|e| provider_error(sandbox, "resuming the E2B sandbox", e))?;
        self.learn(sandbox, resumed.envd_access_token, resumed.domain.as_deref())
    }

    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        // Nothing was made in E2B.
        let Ok(id) = e2b_id(sandbox) else { return Ok(()) };
        let existed = self.api.kill(id).await.map_err(|e| provider_error(sandbox, "killing the E2B sandbox", e))?;
        events::E2bSandboxKilled { sandbox: &sandbox.name, e2b_sandbox: id, existed }.emit();
        Ok(())
    }

    async fn exec(
        &self,
        sandbox: &SandboxRow,
        _command: &str,
        _cwd: Option<&str>,
        _env: &[(String, String)],
        _timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        // Every E2B sandbox has its envd and E2B offers no other way in, so the relay asks here
        // only when the envd did not answer: say why, from E2B's record.
        let id = e2b_id(sandbox)?;
        let detail = self.api.get(id).await.map_err(|e| provider_error(sandbox, "looking up the E2B sandbox", e))?;
        Err(ProviderError::DaemonStart(format!(
            "sandbox {:?}: its envd at {} does not answer (E2B says the sandbox is {:?}), and E2B has no exec \
             without it",
            sandbox.name,
            sandbox.envd_url.as_deref().unwrap_or_default(),
            detail.state.chars().take(40).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(envd_url: &str) -> Settings {
        Settings { api_key: None, domain: "e2b.app".into(), api_url: None, envd_url: envd_url.into() }
    }

    #[test]
    fn the_envd_url_is_e2b_form_by_default() {
        let p = E2bProvider::new(&settings("https://{port}-{sandbox_id}.{domain}")).expect("valid");
        assert_eq!(p.envd_url("iabc", None), "https://49983-iabc.e2b.app");
        assert_eq!(p.envd_url("iabc", Some("eu.e2b.dev")), "https://49983-iabc.eu.e2b.dev");
        // A domain that is not a plain name is not used.
        assert_eq!(p.envd_url("iabc", Some("x/y@z")), "https://49983-iabc.e2b.app");
        assert!(E2bProvider::new(&settings("ftp://{sandbox_id}")).is_err());
        assert!(E2bProvider::new(&settings("no url")).is_err());
    }

    #[test]
    fn ids_and_domains_from_e2b_are_checked() {
        assert!(valid_id("i1x2y3z4a5b6c7d8e9f0"));
        for bad in ["", "a/b", "a.b", "../x", "a b", "a?b"] {
            assert!(!valid_id(bad), "{bad:?}");
        }
        assert!(valid_domain("e2b.app"));
        for bad in ["", ".e2b.app", "a/b", "a:80", "a@b"] {
            assert!(!valid_domain(bad), "{bad:?}");
        }
    }
}
