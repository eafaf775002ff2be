//! What hangar measures of a job's work itself: the scripts it runs in the sandbox (read-only
//! git, the verification) and how it reads their output. Pure functions; no I/O.
//!
//! Everything the sandbox prints is data: it is parsed into typed values (a head must look like
//! an object id, a count like a number), never put into a later command.
use serde::Serialize;

pub use crate::git::{head_script, object_id};
use crate::{
    git::prelude as git_prelude,
    text::{sh_quote, tail_str},
};

/// How much of the verification's output a result keeps (its end).
pub const VERIFY_TAIL_BYTES: usize = 4 * 1024;

/// Prints whether the work tree differs from `$head` (`dirty=0|1`; nothing when it could not be
/// told), after `git_prelude`. Nothing of the agent's configuration or index is trusted:
/// - the work tree is compared with the head's tree through a fresh index, in a git directory of
///   hangar's own making (the head, the repository's objects read through `alternates` so that
///   nothing is written among them, and a configuration of one object
///   format): no filter driver, fsmonitor or hook the agent configured runs, and no
///   assume-unchanged or skip-worktree bit or stat data it wrote hides a change;
/// - untracked files are those the work tree's own `.gitignore` files do not ignore (not
///   `.git/info/exclude`, not `core.excludesFile`, not `status.showUntrackedFiles`);
/// - the agent's index still counts where it differs from the head (a staged change);
/// - `.hangar` at the top is left out (see `facts_script`); a submodule counts by its commit.
const DIRTY: &str = r#"x=':(top,exclude).hangar'
t=$(mktemp -d) || exit 0
trap 'rm -rf -- "$t"' EXIT
common=$(g rev-parse --path-format=absolute --git-common-dir) && format=$(g rev-parse --show-object-format) || exit 0
case $format in sha1 | sha256) ;; *) exit 0 ;; esac
mkdir -p "$t/git/refs" "$t/git/objects/info" && printf '%s/objects\n' "$common" >"$t/git/objects/info/alternates" &&
  printf '%s\n' "$head" >"$t/git/HEAD" &&
  printf '[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n\tobjectformat = %s\n' "$format" >"$t/git/config" ||
  exit 0
m() { GIT_DIR="$t/git" GIT_INDEX_FILE="$t/index" git -c safe.directory='*' "$@" 2>/dev/null; }
m read-tree HEAD && m update-index -q --refresh >/dev/null
m diff-files --quiet --ignore-submodules=dirty -- "$x"; w=$?
m ls-files -z --others --directory --exclude-per-directory=.gitignore -- "$x" >"$t/others"; o=$?
g diff-index --cached --quiet --ignore-submodules=dirty HEAD -- "$x"; c=$?
if [ $w = 1 ] || [ $c = 1 ] || { [ $o = 0 ] && [ -s "$t/others" ]; }; then echo dirty=1
elif [ $w = 0 ] && [ $c = 0 ] && [ $o = 0 ]; then echo dirty=0; fi
"#;

/// The variable in the environment of a job's verification and of everything it starts, by
/// which `stop_verify_script` finds them.
pub const VERIFY_MARKER: &str = "HANGAR_JOB_VERIFY";

/// Runs `verify` in `cwd`, its stderr merged into its stdout, marked with the job's id in its
/// environment. The command is the agent's code's answer, so it runs as the agent, but in an
/// environment of hangar's: `bash --noprofile --norc` (no profile or rc file of the agent's runs
/// first) with only `PATH`, `HOME`, `USER`, `LOGNAME` and `LANG` as the daemon gave them, and the
/// marker.
pub fn verify_script(cwd: &str, verify: &str, job: &str) -> String {
    format!(
        "exec 2>&1; cd -- {} || exit 126\n\
         exec env -i PATH=\"$PATH\" HOME=\"$HOME\" USER=\"$USER\" LOGNAME=\"$LOGNAME\" LANG=\"${{LANG:-C.UTF-8}}\" \
         {VERIFY_MARKER}={} bash --noprofile --norc -c {}",
        sh_quote(cwd),
        sh_quote(job),
        sh_quote(verify)
    )
}

/// Stops the job's verification: SIGTERM to every process (of the user it runs as) with the
/// job's marker in its environment, SIGKILL to those left 5 s later. The script is not marked
/// itself: the marker is a shell variable here, never exported.
pub fn stop_verify_script(job: &str) -> String {
    let marker = sh_quote(&format!("{VERIFY_MARKER}={job}"));
    format!(
        r#"m={marker}
pids() {{ for d in /proc/[0-9]*; do tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF -- "$m" && echo "${{d#/proc/}}"; done; }}
p=$(pids); [ -z "$p" ] && exit 0
kill -TERM $p 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do sleep 0.5; p=$(pids); [ -z "$p" ] && exit 0; done
kill -KILL $p 2>/dev/null; exit 0
"#
    )
}

/// Prints `key=value` lines: `git=yes|no`, then `head`, `branch`, `upstream` (when the branch
/// has one), `dirty` (0 or 1, see `DIRTY`) and `ahead` (with a base). `dirty` leaves out
/// `.hangar` at the repository's top: the agent's run directory where its home is the
/// repository's top (E2B's `/home/user`), hangar's files rather than the agent's work.
pub fn facts_script(cwd: &str, base: Option<&str>) -> String {
    let mut s = format!(
        "{}head=$(g rev-parse --verify -q HEAD) || {{ echo git=no; exit 0; }}\n\
         echo git=yes\n\
         echo \"head=$head\"\n\
         echo \"branch=$(g rev-parse --abbrev-ref HEAD)\"\n\
         if u=$(g rev-parse -q --verify '@{{u}}'); then echo \"upstream=$u\"; fi\n",
        git_prelude(cwd)
    );
    // `base` is an object id hangar read and checked, quoted all the same.
    if let Some(base) = base.and_then(object_id) {
        s.push_str(&format!("echo \"ahead=$(g rev-list --count {})\"\n", sh_quote(&format!("{base}..HEAD"))));
    }
    // Last: it may exit early.
    s.push_str(&format!("({DIRTY})\n"));
    s
}

/// The repository's state as hangar read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GitFacts {
    pub branch: Option<String>,
    pub head: Option<String>,
    pub commits_ahead: Option<u64>,
    pub dirty: Option<bool>,
    /// Whether the branch's upstream is at its head; null when it has none.
    pub pushed: Option<bool>,
}

/// Reads `facts_script`'s output; `None` when `cwd` is not a git repository (with a commit).
pub fn parse_facts(out: &str) -> Option<GitFacts> {
    let mut facts = GitFacts::default();
    let mut git = false;
    let mut upstream = None;
    for line in out.lines() {
        let Some((k, v)) = line.split_once('=') else { continue };
        match k {
            "git" => git = v == "yes",
            "head" => facts.head = object_id(v),
            // A branch name is the agent's to choose: kept as text, at most 255 bytes.
            "branch" if !v.is_empty() && v.len() <= 255 => facts.branch = Some(v.to_string()),
            "ahead" => facts.commits_ahead = v.trim().parse().ok(),
            "dirty" => facts.dirty = Some(v == "1"),
            "upstream" => upstream = object_id(v),
            _ => {}
        }
    }
    if !git {
        return None;
    }
    facts.pushed = upstream.map(|u| facts.head.as_deref() == Some(u.as_str()));
    Some(facts)
}

/// The verification's end as hangar saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verification {
    pub command: String,
    pub exit_code: i32,
    pub timed_out: bool,
    /// The last 4 KiB of its output (stdout and stderr merged), redacted.
    pub output_tail: String,
}

impl Verification {
    pub fn passed(&self) -> bool {
        self.exit_code == 0 && !self.timed_out
    }
}

pub fn output_tail(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    tail_str(&text, VERIFY_TAIL_BYTES).to_string()
}

/// The first pull or merge request URL in `text`: `https://github.com/<o>/<r>/pull/<n>`, or a
/// GitLab `https://<host with gitlab>/<path>/-/merge_requests/<n>`, cut after the number.
pub fn pr_url(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(at) = rest.find("https://") {
        let candidate = &rest[at..];
        let end = candidate.find(|c: char| c.is_whitespace() || "()[]<>\"'`,;".contains(c)).unwrap_or(candidate.len());
        if let Some(url) = request_url(&candidate[..end]) {
            return Some(url);
        }
        rest = &candidate["https://".len()..];
    }
    None
}

fn request_url(url: &str) -> Option<String> {
    let path = url.strip_prefix("https://")?;
    let parts: Vec<&str> = path.split('/').collect();
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    // The number, and what follows it in its segment: nothing, or punctuation (`42.`, `7#x`).
    let number = |s: &str| -> Option<String> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let next = s.as_bytes().get(digits);
        let ends = next.is_none_or(|b| !(b.is_ascii_alphanumeric() || b"_-".contains(b)));
        ((1..=12).contains(&digits) && ends).then(|| s[..digits].to_string())
    };
    if parts.len() >= 5 && parts[0] == "github.com" && plain(parts[1]) && plain(parts[2]) && parts[3] == "pull" {
        return number(parts[4]).map(|n| format!("https://github.com/{}/{}/pull/{n}", parts[1], parts[2]));
    }
    if plain(parts[0]) && parts[0].contains("gitlab") {
        let mr = parts.iter().position(|p| *p == "merge_requests")?;
        let n = number(parts.get(mr + 1)?)?;
        let ok = mr >= 4 && parts[mr - 1] == "-" && parts[1..mr - 1].iter().all(|p| plain(p));
        return ok.then(|| format!("https://{}/{n}", parts[..=mr].join("/")));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_request_urls_are_found_and_cut_after_their_number() {
        assert_eq!(
            pr_url("Opened https://github.com/acme/shipper/pull/42. Done").as_deref(),
            Some("https://github.com/acme/shipper/pull/42")
        );
        assert_eq!(
            pr_url("see (https://github.com/a/b/pull/7/files#x)").as_deref(),
            Some("https://github.com/a/b/pull/7")
        );
        assert_eq!(
            pr_url("https://github.com/a/b/issues/3 then https://gitlab.com/g/sub/p/-/merge_requests/12?x=1")
                .as_deref(),
            Some("https://gitlab.com/g/sub/p/-/merge_requests/12")
        );
        assert_eq!(pr_url("https://github.com/a/b/pull/x https://evil.com/a/b/pull/1"), None);
        assert_eq!(pr_url("https://github.com/a b/c/pull/1"), None);
        assert_eq!(pr_url("https://github.com/a/b/pull/12abc"), None);
        assert_eq!(pr_url("no url"), None);
    }

    #[test]
    fn facts_are_parsed_as_typed_values_and_pushed_compares_the_upstream() {
        let head = "a".repeat(40);
        let out = format!("git=yes\nhead={head}\nbranch=work\ndirty=0\nupstream={head}\nahead=1\n");
        let f = parse_facts(&out).expect("facts");
        assert_eq!(
            f,
            GitFacts {
                branch: Some("work".into()),
                head: Some(head.clone()),
                commits_ahead: Some(1),
                dirty: Some(false),
                pushed: Some(true)
            }
        );
        let f = parse_facts(&format!("git=yes\nhead={head}\nbranch=w\ndirty=1\nupstream={}\n", "b".repeat(40)))
            .expect("facts");
        assert_eq!((f.pushed, f.dirty, f.commits_ahead), (Some(false), Some(true), None));
        let f = parse_facts("git=yes\nhead=$(rm -rf /)\nbranch=w\n").expect("facts");
        assert_eq!((f.head, f.pushed), (None, None));
        assert_eq!(parse_facts("git=no\n"), None);
    }

    #[test]
    fn scripts_quote_what_they_are_given() {
        let s = verify_script("/w/it's", "make test; echo 'ok'", "job_1");
        assert!(s.contains(r"'/w/it'\''s'") && s.contains(r"'make test; echo '\''ok'\'''"), "{s}");
        assert!(s.contains("HANGAR_JOB_VERIFY='job_1' bash --noprofile --norc -c "), "{s}");
        assert!(stop_verify_script("job_'x").starts_with(r"m='HANGAR_JOB_VERIFY=job_'\''x'"));
        assert!(!facts_script("/w", Some("not-an-id; rm -rf /")).contains("not-an-id"));
        assert!(facts_script("/w", Some(&"c".repeat(40))).contains(&format!("'{}..HEAD'", "c".repeat(40))));
    }
}
