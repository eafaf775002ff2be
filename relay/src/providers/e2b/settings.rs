//! The `e2b` provider's settings (flags and variables of `hangar-relay serve`).
use clap::Args;

/// How the `e2b` provider reaches E2B (docs/e2b.md).
// The group is named for clap, which takes a struct's name as its group and has `Settings` from Kubernetes.
#[derive(Debug, Clone, Args)]
#[group(id = "E2bSettings")]
pub struct Settings {
    /// The E2B API key (`e2b_...`) that e2b sandboxes are created with. Never logged; without it
    /// creating an e2b sandbox fails with a clear error.
    #[arg(long = "e2b-api-key", env = "HANGAR_E2B_API_KEY", hide_env_values = true)]
    pub api_key: Option<ApiKey>,

    /// E2B's domain: the API is `https://api.<domain>` and sandboxes are under it.
    #[arg(long = "e2b-domain", env = "HANGAR_E2B_DOMAIN", default_value = "e2b.app")]
    pub domain: String,

    /// E2B's REST API (default: `https://api.<domain>`).
    #[arg(long = "e2b-api-url", env = "HANGAR_E2B_API_URL")]
    pub api_url: Option<String>,

    /// Where a sandbox's envd is reached: `{sandbox_id}`, `{domain}` (the domain E2B names for
    /// the sandbox, else `--e2b-domain`) and `{port}` (49983) are filled in. Requests also carry
    /// `E2b-Sandbox-Id` and `E2b-Sandbox-Port`, which route them at E2B's shared host
    /// (`https://sandbox.<domain>`) or at an address given by IP.
    #[arg(long = "e2b-envd-url", env = "HANGAR_E2B_ENVD_URL", default_value = "https://{port}-{sandbox_id}.{domain}")]
    pub envd_url: String,
}

/// A credential from the configuration: its `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// The key itself, for the one header it goes into.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ApiKey(s.to_string()))
    }
}
