//! Reading the agent's git repository from the relay's scripts: the one way they start git
//! (`prelude`), and what they print read back as typed values. Shared by jobs (`jobs::measure`)
//! and sessions (`sessions::diff`). Pure functions; no I/O.
//!
//! Everything the sandbox prints is data: parsed into typed values (a head must look like an
//! object id), never put into a later command.
use crate::text::sh_quote;

/// The start of every script that reads a repository (a job's, a session's): `cd` to `cwd`, then git as hangar
/// runs it (`g`), with `GIT_DIR` and `GIT_WORK_TREE` fixed, or `git=no` and an exit.
///
/// The repository is the agent's, and so is its configuration: git reads no system or global
/// configuration, no replace refs or grafts (which would change the history it counts), runs no
/// fsmonitor command and no hook, writes nothing (no optional locks, no automatic gc), and takes
/// the work tree from where `.git` is rather than from `core.worktree`. `safe.directory` lets
/// root read a repository the agent owns.
pub fn prelude(cwd: &str) -> String {
    format!(
        r#"cd -- {cwd} 2>/dev/null || {{ echo git=no; exit 0; }}
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_COMMON_DIR \
  GIT_NAMESPACE GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT GIT_CEILING_DIRECTORIES
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 GIT_NO_REPLACE_OBJECTS=1 \
  GIT_GRAFT_FILE=/dev/null GIT_OPTIONAL_LOCKS=0 GIT_TERMINAL_PROMPT=0 GIT_NO_LAZY_FETCH=1
g() {{ git -c safe.directory='*' -c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.untrackedCache=false \
  -c gc.auto=0 -c maintenance.auto=false "$@" 2>/dev/null; }}
top=$PWD
while [ ! -e "$top/.git" ] && [ -n "$top" ]; do top=${{top%/*}}; done
[ -e "${{top:-/}}/.git" ] || {{ echo git=no; exit 0; }}
export GIT_WORK_TREE="${{top:-/}}"
GIT_DIR=$(cd -- "$GIT_WORK_TREE" && g rev-parse --absolute-git-dir) || {{ echo git=no; exit 0; }}
export GIT_DIR
"#,
        cwd = sh_quote(cwd)
    )
}

/// Prints the head commit of the repository at `cwd` (nothing outside a repository, or in one
/// without commits).
pub fn head_script(cwd: &str) -> String {
    format!("{}g rev-parse --verify -q HEAD\n", prelude(cwd))
}

/// A git object id: 40 (SHA-1) or 64 (SHA-256) hex digits.
pub fn object_id(s: &str) -> Option<String> {
    let s = s.trim();
    ((s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_ascii_lowercase())
}
