//! What the agent has changed: a session's work tree compared with where one of its turns
//! started (`GET /api/sessions/{ref}/diff`, the `session` tool's `diff`, `hangar diff`).
//!
//! Where a turn starts is the relay's own read, made before its harness runs (`record_base`:
//! `git rev-parse HEAD` as root where the uid split holds) and kept on the turn; never a file the
//! agent writes. The diff is read by one script (`summary_script`, `patch_script`) that trusts
//! nothing of the agent's repository but its objects and its work tree's files:
//! - git runs in a git directory of hangar's own making in a temporary directory outside the work
//!   tree (`jobs::measure`'s way): the turn's start read into a fresh index of its own, the
//!   repository's objects read through `alternates` (nothing is written into them), and a configuration of hangar's. The agent's `.git/config`, its
//!   index, its hooks and its info/ files are never read, so no `core.pager`, `diff.external`,
//!   `diff.<driver>.command` or `textconv`, `filter.<name>.clean`, `core.fsmonitor` or hook it
//!   set can run; `--no-ext-diff --no-textconv` and no system or global configuration besides.
//! - untracked files (those the work tree's `.gitignore` files do not ignore) are added to that
//!   index with `--intent-to-add`, which writes no object and reads no content.
//! - the output is git's `-z` forms, parsed here as untrusted bytes into typed values.
//!
//! Bounded: at most `MAX_FILES` files and `LIST_BYTES` of their list, `MAX_PATCH_BYTES` of one
//! file's patch, the answer saying what was cut. Cheap: an answer is reused for `FRESH` (its
//! `computed_at` says when it was read), and a session computes one answer at a time.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use schemars::JsonSchema;
use serde::Serialize;

use super::{
    supervisor::{Place, Shell, SCRIPT_TIMEOUT},
    Sessions,
};
use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    git::{object_id, prelude},
    providers::{ExecOutput, EXEC_OUTPUT_BYTES},
    sandboxes::run::User,
    store::{SessionRow, TurnRow},
    text::{head_str, sh_quote},
    time,
};

/// The most files a summary lists.
pub const MAX_FILES: usize = 500;
/// The most of one file's patch an answer holds.
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;
/// The most of each of git's file lists (`--raw`, `--numstat`) a summary reads.
pub const LIST_BYTES: usize = 512 * 1024;
/// Through a provider's exec (a sandbox without its daemon) an output is cut at
/// `EXEC_OUTPUT_BYTES`: the bounds there, which leave room for the script's few other lines.
const FALLBACK_LIST_BYTES: usize = 96 * 1024;
const FALLBACK_PATCH_BYTES: usize = 192 * 1024;
/// How long an answer is reused.
pub const FRESH: Duration = Duration::from_secs(1);
/// The longest path a client may ask the patch of.
const MAX_PATH_BYTES: usize = 4096;
/// Sessions whose last answer is older than this are forgotten by the next one computed.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Where a turn started, as the relay read it before its harness ran.
#[derive(Debug, Clone, PartialEq)]
pub enum Base {
    Commit(String),
    /// A repository without a commit yet: every file is new.
    Unborn,
    /// The session's directory was in no git repository.
    NoRepository,
}

impl Base {
    /// Its stored form (`turns.base`).
    fn stored(&self) -> String {
        match self {
            Base::Commit(c) => c.clone(),
            Base::Unborn => "unborn".into(),
            Base::NoRepository => "none".into(),
        }
    }

    fn from_stored(s: &str) -> Option<Base> {
        match s {
            "unborn" => Some(Base::Unborn),
            "none" => Some(Base::NoRepository),
            s => object_id(s).map(Base::Commit),
        }
    }

    /// What `git::head_script` printed: `git=no` outside a repository, the head, or nothing (and
    /// exit 1) in a repository without a commit. `None`: the read failed.
    fn read(out: &ExecOutput) -> Option<Base> {
        if out.timed_out {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        match text.trim() {
            "git=no" => Some(Base::NoRepository),
            "" if out.exit_code == 1 => Some(Base::Unborn),
            t => object_id(t).filter(|_| out.exit_code == 0).map(Base::Commit),
        }
    }
}

/// Runs one of this module's read-only git scripts: as root where the uid split holds, so that
/// nothing the agent left running as its own user can reach them; as the agent elsewhere, where
/// everything in the sandbox is the agent's anyway.
async fn run_git(shell: &Shell<'_>, place: &Place, script: &str, keep: usize) -> Result<ExecOutput> {
    shell.script_keeping(User::root_if(place.split), script, SCRIPT_TIMEOUT, keep).await
}

/// Reads and records where the turn starts, before its harness runs; a turn whose start is
/// recorded already (a start tried again) keeps it. A read that fails is said in the log and
/// fails nothing: that turn's diff says its start was not recorded.
pub(super) async fn record_base(
    sessions: &Sessions,
    shell: &Shell<'_>,
    place: &Place,
    session: &SessionRow,
    turn: &TurnRow,
) -> Result<()> {
    if sessions.store.turn_base(&turn.id).await?.is_some() {
        return Ok(());
    }
    let read = run_git(shell, place, &crate::git::head_script(&session.cwd), EXEC_OUTPUT_BYTES).await;
    match read.as_ref().ok().and_then(Base::read) {
        Some(base) => sessions.store.set_turn_base(&turn.id, &base.stored()).await?,
        None => {
            let why = match read {
                Ok(out) if out.timed_out => format!("no answer in {} s", SCRIPT_TIMEOUT.as_secs()),
                Ok(out) => format!("git's answer was not a commit (exit {})", out.exit_code),
                Err(e) => e.to_string(),
            };
            let error = format!("reading where the turn starts, for its diff: {why}");
            events::TurnTrouble { turn: &turn.id, error: &error }.emit();
        }
    }
    Ok(())
}

/// A file the agent changed.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FileDiff {
    /// Relative to the repository's top
    pub path: String,
    /// A renamed file's path before
    pub old_path: Option<String>,
    pub status: Status,
    /// Lines added (0 for a binary file)
    pub added: u64,
    /// Lines removed (0 for a binary file)
    pub removed: u64,
    pub binary: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Added,
    Modified,
    Deleted,
    Renamed,
}

/// The whole diff's counts (every file, the listed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
pub struct Totals {
    pub files: u64,
    pub added: u64,
    pub removed: u64,
}

/// What the agent has changed since a turn started: `GET /api/sessions/{ref}/diff`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DiffView {
    /// The session's id
    pub session: String,
    /// The turn (its n) whose start the work tree is compared with
    pub turn: i64,
    /// Whether there is a diff: false when the session's directory was in no git repository
    /// as the turn started (or is in none now, or its start is unknown); `reason` says which
    pub repository: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The commit the turn started at (null in a repository without a commit then)
    pub base: Option<String>,
    /// When this was read (epoch seconds); an answer is reused for a second
    pub computed_at: f64,
    pub files: Vec<FileDiff>,
    pub totals: Totals,
    /// Why `files` is not the whole list, when it is not
    pub truncated: Option<String>,
}

/// One file's patch: `GET /api/sessions/{ref}/diff?path=`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PatchView {
    /// The session's id
    pub session: String,
    pub turn: i64,
    pub path: String,
    /// See the summary's `repository` and `reason`
    pub repository: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub base: Option<String>,
    pub computed_at: f64,
    /// The file's unified diff (git's, with a/ and b/ prefixes); empty when it has not changed
    pub patch: String,
    /// Why `patch` is not the whole of it, when it is not
    pub truncated: Option<String>,
}

/// What a diff read answers: the summary, or one file's patch.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Answer {
    Summary(DiffView),
    Patch(PatchView),
}

/// A read of a session's diff as a client asked for it.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    /// One file's patch rather than the summary.
    pub path: Option<String>,
    /// The turn (its n; default the latest that has started).
    pub turn: Option<i64>,
}

/// Recent answers, per session: each reused for `FRESH`; a session's lock held while one is
/// computed, so that a session computes one at a time and callers within the second share it.
#[derive(Default)]
pub struct Cache {
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Recent>>>>,
}

#[derive(Default)]
struct Recent {
    summary: Option<(Instant, i64, DiffView)>,
    patch: Option<(Instant, i64, String, PatchView)>,
    last: Option<Instant>,
}

impl Cache {
    fn of(&self, session: &str) -> Arc<tokio::sync::Mutex<Recent>> {
        let mut all = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() > 64 {
            // Forget sessions no one has asked of lately (none is being computed: its lock is free).
            all.retain(|_, r| r.try_lock().map_or(true, |r| r.last.is_some_and(|t| t.elapsed() < FORGET_AFTER)));
        }
        all.entry(session.to_string()).or_default().clone()
    }
}

/// Refuses a path no file of a repository has: empty, absolute, with a `..` part or a NUL.
fn check_path(path: &str) -> Result<()> {
    let bad = path.is_empty()
        || path.len() > MAX_PATH_BYTES
        || path.starts_with('/')
        || path.contains('\0')
        || path.split('/').any(|p| p == "..");
    if bad {
        return Err(Error::invalid(format!(
            "path {:?}: a file's path relative to the repository's top, as the summary lists it \
             (1 to {MAX_PATH_BYTES} bytes, no '..')",
            head_str(path, 200)
        )));
    }
    Ok(())
}

/// The diff of the session (found for the caller already) against its turn's start.
pub async fn read(sessions: &Sessions, caller: &Caller, session: &SessionRow, ask: Ask) -> Result<Answer> {
    if let Some(p) = &ask.path {
        check_path(p)?;
    }
    let turns = sessions.store.turns(&session.id).await?;
    let (turn, base) = match ask.turn {
        Some(n) => {
            let t = turns.iter().find(|t| t.n == n).ok_or_else(|| {
                Error::not_found(format!("session {:?} has no turn {n} (it has {})", session.name, turns.len()))
            })?;
            (t, sessions.store.turn_base(&t.id).await?)
        }
        None => {
            let mut found = None;
            for t in turns.iter().rev() {
                if let Some(b) = sessions.store.turn_base(&t.id).await? {
                    found = Some((t, Some(b)));
                    break;
                }
            }
            match found.or_else(|| turns.last().map(|t| (t, None))) {
                Some(f) => f,
                None => return Err(Error::not_found(format!("session {:?} has no turn", session.name))),
            }
        }
    };
    let n = turn.n;
    let base = match base.as_deref().map(Base::from_stored) {
        Some(Some(b)) => b,
        _ => {
            let why = if turn.started_at.is_none() && !turn.state.is_terminal() {
                format!("turn {n} has not started yet: there is nothing to compare")
            } else {
                format!("where turn {n} started was not recorded")
            };
            return Ok(unavailable(session, n, &ask, None, why));
        }
    };
    if base == Base::NoRepository {
        let why = format!("{} was in no git repository when turn {n} started", session.cwd);
        return Ok(unavailable(session, n, &ask, None, why));
    }
    // The session's sandbox, if its person may still use it (each way inside passes `enter`).
    let row = match sessions.sandboxes.enter(&session.sandbox_id, caller).await {
        Err(Error::NotFound(_)) => {
            return Err(Error::Conflict(format!("session {:?}'s sandbox is gone", session.name)));
        }
        r => r?,
    };
    let recent = sessions.diffs.of(&session.id);
    let mut recent = recent.lock().await;
    recent.last = Some(Instant::now());
    let fresh = |at: &Instant| at.elapsed() < FRESH;
    match &ask.path {
        None => {
            if let Some((at, t, v)) = &recent.summary {
                if *t == n && fresh(at) {
                    return Ok(Answer::Summary(v.clone()));
                }
            }
        }
        Some(p) => {
            if let Some((at, t, path, v)) = &recent.patch {
                if *t == n && path == p && fresh(at) {
                    return Ok(Answer::Patch(v.clone()));
                }
            }
        }
    }
    let shell = Shell::open(sessions, row).await?;
    let place = shell.place().await?;
    let daemon = shell.envd.is_some();
    let commit = match &base {
        Base::Commit(c) => Some(c.clone()),
        _ => None,
    };
    let redactor = sessions.secrets.redactor();
    let answer = match ask.path {
        None => {
            let view = summarize(sessions, &shell, &place, session, n, commit).await?;
            recent.summary = Some((Instant::now(), n, view.clone()));
            Answer::Summary(view)
        }
        Some(path) => {
            // A renamed file's patch needs its old path beside it (a rename is a pair): from the
            // turn's summary, read first when there is none (a patch asked for straight away).
            if recent.summary.as_ref().is_none_or(|(_, t, _)| *t != n) {
                let view = summarize(sessions, &shell, &place, session, n, commit.clone()).await?;
                recent.summary = Some((Instant::now(), n, view));
            }
            let old = recent
                .summary
                .as_ref()
                .filter(|(_, t, _)| *t == n)
                .and_then(|(_, _, v)| v.files.iter().find(|f| f.path == path))
                .and_then(|f| f.old_path.clone());
            let max = if daemon { MAX_PATCH_BYTES } else { FALLBACK_PATCH_BYTES };
            let script = patch_script(&session.cwd, commit.as_deref(), &path, old.as_deref(), max);
            let out = run_git(&shell, &place, &script, max + 64 * 1024).await?;
            let read = checked(out, "reading the file's diff")?;
            let mut view = PatchView {
                session: session.id.clone(),
                turn: n,
                path: path.clone(),
                repository: true,
                reason: None,
                base: commit,
                computed_at: time::now(),
                patch: String::new(),
                truncated: None,
            };
            match read {
                Read::Gone(why) => {
                    view.repository = false;
                    view.reason = Some(why.of(&session.cwd, n));
                }
                Read::Ok(body) => {
                    let (patch, truncated) = parse_patch(&body, max, daemon);
                    view.patch = redactor.text(&patch).into_owned();
                    view.truncated = truncated;
                }
            }
            recent.patch = Some((Instant::now(), n, path, view.clone()));
            Answer::Patch(view)
        }
    };
    Ok(answer)
}

/// Reads the summary of the session's work tree against `commit` (none: an empty tree).
async fn summarize(
    sessions: &Sessions,
    shell: &Shell<'_>,
    place: &Place,
    session: &SessionRow,
    n: i64,
    commit: Option<String>,
) -> Result<DiffView> {
    let list_bytes = if shell.envd.is_some() { LIST_BYTES } else { FALLBACK_LIST_BYTES };
    let script = summary_script(&session.cwd, commit.as_deref(), list_bytes);
    let out = run_git(shell, place, &script, 2 * list_bytes + 64 * 1024).await?;
    let read = checked(out, "reading the diff")?;
    let mut view = DiffView {
        session: session.id.clone(),
        turn: n,
        repository: true,
        reason: None,
        base: commit,
        computed_at: time::now(),
        files: Vec::new(),
        totals: Totals::default(),
        truncated: None,
    };
    match read {
        Read::Gone(why) => {
            view.repository = false;
            view.reason = Some(why.of(&session.cwd, n));
        }
        Read::Ok(body) => {
            let s = parse_summary(&body, list_bytes);
            let redactor = sessions.secrets.redactor();
            view.files = s.files;
            for f in &mut view.files {
                f.path = redactor.text(&f.path).into_owned();
                f.old_path = f.old_path.as_deref().map(|p| redactor.text(p).into_owned());
            }
            view.totals = s.totals;
            view.truncated = s.truncated;
        }
    }
    Ok(view)
}

/// An answer with nothing to show, and why.
fn unavailable(session: &SessionRow, n: i64, ask: &Ask, base: Option<String>, why: String) -> Answer {
    let computed_at = time::now();
    match &ask.path {
        None => Answer::Summary(DiffView {
            session: session.id.clone(),
            turn: n,
            repository: false,
            reason: Some(why),
            base,
            computed_at,
            files: Vec::new(),
            totals: Totals::default(),
            truncated: None,
        }),
        Some(path) => Answer::Patch(PatchView {
            session: session.id.clone(),
            turn: n,
            path: path.clone(),
            repository: false,
            reason: Some(why),
            base,
            computed_at,
            patch: String::new(),
            truncated: None,
        }),
    }
}

/// What a diff script said before its data.
#[derive(Debug, PartialEq)]
enum Read {
    /// Its data (after the `--` line).
    Ok(Vec<u8>),
    Gone(Gone),
}

/// Why a repository there at the turn's start cannot be compared now.
#[derive(Debug, PartialEq)]
enum Gone {
    /// No repository at the session's directory now.
    NoRepository,
    /// The start's commit is not in it.
    NoBase,
}

impl Gone {
    fn of(&self, cwd: &str, n: i64) -> String {
        match self {
            Gone::NoRepository => format!("{cwd} is in no git repository now"),
            Gone::NoBase => format!("the commit turn {n} started at is no longer in the repository at {cwd}"),
        }
    }
}

/// A script's answer read: its first line says how it went (`diff=ok` then `--` and the data,
/// `git=no`, `diff=no_base`); anything else is the sandbox's failure.
fn checked(out: ExecOutput, what: &str) -> Result<Read> {
    if out.timed_out {
        return Err(Error::unavailable(format!(
            "{what}: no answer in {} s (the sandbox is busy)",
            SCRIPT_TIMEOUT.as_secs()
        )));
    }
    let data = out.stdout;
    if data.starts_with(b"git=no\n") {
        return Ok(Read::Gone(Gone::NoRepository));
    }
    if data.starts_with(b"diff=no_base\n") {
        return Ok(Read::Gone(Gone::NoBase));
    }
    if let Some(rest) = data.strip_prefix(b"diff=ok\n--\n".as_slice()) {
        return Ok(Read::Ok(rest.to_vec()));
    }
    let said = String::from_utf8_lossy(&data[..data.len().min(200)]).into_owned();
    Err(Error::daemon(format!(
        "{what} failed (exit {}): {}",
        out.exit_code,
        head_str(said.lines().next().unwrap_or(""), 200)
    )))
}

/// The start of both diff scripts: after `git::prelude` (the repository found, or `git=no`),
/// hangar's own git directory in a temporary directory (`$t`, removed at exit) holding the
/// repository's objects (read through `alternates`: what git writes, the empty blob an intent-to-add
/// records, goes to `$t`, never into the agent's `.git`), a configuration of hangar's, and an index made from the turn's
/// start (`base`, an object id hangar read and checked; none: an empty tree) plus the untracked
/// files, marked intent-to-add; `m` runs git in it, in the work tree's top.
fn setup(cwd: &str, base: Option<&str>) -> String {
    // `base` is an object id hangar read and checked, quoted all the same.
    let base = sh_quote(base.and_then(object_id).as_deref().unwrap_or(""));
    format!(
        r#"{prelude}export LC_ALL=C
unset GIT_EXTERNAL_DIFF GIT_PAGER PAGER GIT_DIFF_OPTS GIT_ATTR_SOURCE GIT_LITERAL_PATHSPECS GIT_GLOB_PATHSPECS \
  GIT_NOGLOB_PATHSPECS GIT_ICASE_PATHSPECS BASH_ENV
fail() {{ echo "diff=error: $1"; exit 0; }}
base={base}
x=':(top,exclude).hangar'
t=$(mktemp -d) || fail "no temporary directory"
trap 'rm -rf -- "$t"' EXIT
common=$(g rev-parse --path-format=absolute --git-common-dir) && format=$(g rev-parse --show-object-format) || fail "git could not read the repository"
case $format in sha1 | sha256) ;; *) fail "an unknown object format" ;; esac
case $common in *"
"*) fail "a git directory whose path has a line break" ;; esac
mkdir -p "$t/git/refs" "$t/git/objects/info" && printf '%s/objects\n' "$common" >"$t/git/objects/info/alternates" &&
  echo 'ref: refs/heads/hangar' >"$t/git/HEAD" &&
  printf '[core]\n\trepositoryformatversion = 1\n\tbare = false\n\tbigFileThreshold = 8m\n[extensions]\n\tobjectformat = %s\n' \
    "$format" >"$t/git/config" || fail "the temporary git directory could not be made"
m() {{ GIT_DIR="$t/git" GIT_INDEX_FILE="$t/index" git --no-pager -c safe.directory='*' -c core.fsmonitor=false \
  -c core.hooksPath=/dev/null -c core.attributesFile=/dev/null -c core.excludesFile=/dev/null -c diff.external= \
  -c core.untrackedCache=false -c gc.auto=0 -c maintenance.auto=false "$@" 2>/dev/null; }}
cd -- "$GIT_WORK_TREE" || fail "the work tree is gone"
if [ -n "$base" ]; then
  m cat-file -e "$base^{{commit}}" && m read-tree "$base" || {{ echo diff=no_base; exit 0; }}
else
  m read-tree --empty || fail "git read-tree failed"
fi
m ls-files -z --others --exclude-per-directory=.gitignore -- "$x" >"$t/others" || fail "listing the untracked files failed"
if [ -s "$t/others" ]; then
  m --literal-pathspecs add --intent-to-add --pathspec-from-file="$t/others" --pathspec-file-nul >/dev/null ||
    fail "adding the untracked files to the temporary index failed (git 2.25 or later is needed)"
fi
m update-index -q --refresh >/dev/null
d() {{ m diff-files --no-ext-diff --no-textconv --no-color --ignore-submodules=dirty -M "$@"; }}
"#,
        prelude = prelude(cwd)
    )
}

/// Prints `diff=ok`, `--`, then git's `--raw -z` and `--numstat -z` file lists, each cut after
/// `max` bytes (and one, to tell a cut), after a line of their lengths, and `--shortstat`.
fn summary_script(cwd: &str, base: Option<&str>, max: usize) -> String {
    format!(
        "{}d -z --raw -- \"$x\" | head -c {cut} >\"$t/raw\"\n\
         d -z --numstat -- \"$x\" | head -c {cut} >\"$t/num\"\n\
         d --shortstat -- \"$x\" | head -c 300 | tr -d '\\n' >\"$t/short\"\n\
         printf 'diff=ok\\n--\\n%s %s %s\\n' \"$(wc -c <\"$t/raw\")\" \"$(wc -c <\"$t/num\")\" \"$(wc -c <\"$t/short\")\"\n\
         cat \"$t/raw\" \"$t/num\" \"$t/short\"\n",
        setup(cwd, base),
        cut = max + 1
    )
}

/// Prints `diff=ok`, `--`, then the patch of `path` (beside `old`, a renamed file's path before),
/// cut after `max` bytes (and one, to tell a cut).
fn patch_script(cwd: &str, base: Option<&str>, path: &str, old: Option<&str>, max: usize) -> String {
    let spec = |p: &str| sh_quote(&format!(":(top,literal){p}"));
    let specs = match old {
        Some(o) if o != path => format!("{} {}", spec(o), spec(path)),
        _ => spec(path),
    };
    format!("{}echo diff=ok; echo --\nd -p --full-index -- {specs} | head -c {}\n", setup(cwd, base), max + 1)
}

/// A summary as parsed.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    files: Vec<FileDiff>,
    totals: Totals,
    truncated: Option<String>,
}

/// Reads `summary_script`'s data: `<raw length> <numstat length> <shortstat length>\n`, then the
/// three. Lists longer than `max` were cut: their last, partial entry is dropped.
fn parse_summary(data: &[u8], max: usize) -> Summary {
    let mut out = Summary::default();
    let Some(nl) = data.iter().position(|&b| b == b'\n') else { return out };
    let lens: Vec<usize> =
        String::from_utf8_lossy(&data[..nl]).split_whitespace().filter_map(|n| n.parse().ok()).collect();
    let [raw_len, num_len, short_len] = lens[..] else { return out };
    let body = &data[nl + 1..];
    let (Some(raw), Some(num), Some(short)) = (
        body.get(..raw_len),
        body.get(raw_len..raw_len + num_len),
        body.get(raw_len + num_len..raw_len + num_len + short_len),
    ) else {
        return out;
    };
    let cut = raw_len > max;
    let entries = raw_entries(if cut { &raw[..max] } else { raw });
    let counts = numstat(if num_len > max { &num[..max] } else { num });
    let all = entries.len();
    for (status, old, path) in entries.into_iter().take(MAX_FILES) {
        let (added, removed, binary) = counts.get(&path).copied().unwrap_or((0, 0, false));
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        out.files.push(FileDiff {
            path: text(&path),
            old_path: old.as_deref().map(text),
            status,
            added,
            removed,
            binary,
        });
    }
    out.totals = shortstat(&String::from_utf8_lossy(short)).unwrap_or_else(|| Totals {
        files: out.files.len() as u64,
        added: out.files.iter().map(|f| f.added).sum(),
        removed: out.files.iter().map(|f| f.removed).sum(),
    });
    if all > MAX_FILES {
        out.truncated = Some(format!("more than {MAX_FILES} files: the first {MAX_FILES} shown"));
    } else if cut {
        out.truncated = Some(format!(
            "the list of changed files is longer than {} KiB: the first {} files shown",
            max / 1024,
            out.files.len()
        ));
    }
    out
}

/// `--raw -z` entries: `:<modes and ids> <status>\0<path>\0` (`\0<new path>\0` after a rename's
/// or copy's). An entry the data ends in the middle of is dropped.
fn raw_entries(data: &[u8]) -> Vec<(Status, Option<Vec<u8>>, Vec<u8>)> {
    let mut tokens: Vec<&[u8]> = data.split(|&b| b == 0).collect();
    // What follows the last NUL is an entry's unfinished part (or nothing).
    tokens.pop();
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let header = tokens[i];
        i += 1;
        let Some(status) = header.strip_prefix(b":").and_then(|h| h.split(|&b| b == b' ').nth(4)) else { continue };
        let two = matches!(status.first(), Some(b'R' | b'C'));
        let need = if two { 2 } else { 1 };
        if i + need > tokens.len() {
            break;
        }
        let status = match status.first() {
            Some(b'A' | b'C') => Status::Added,
            Some(b'D') => Status::Deleted,
            Some(b'R') => Status::Renamed,
            _ => Status::Modified,
        };
        if two {
            out.push((status, Some(tokens[i].to_vec()), tokens[i + 1].to_vec()));
        } else {
            out.push((status, None, tokens[i].to_vec()));
        }
        i += need;
    }
    out
}

/// `--numstat -z` entries: `<added>\t<removed>\t<path>\0`, or `<added>\t<removed>\t\0<old>\0<new>\0`
/// for a rename; `-` counts are a binary file's. By (new) path.
fn numstat(data: &[u8]) -> HashMap<Vec<u8>, (u64, u64, bool)> {
    let mut tokens: Vec<&[u8]> = data.split(|&b| b == 0).collect();
    tokens.pop();
    let mut out = HashMap::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        i += 1;
        let mut parts = t.splitn(3, |&b| b == b'\t');
        let (Some(a), Some(r), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let path = if path.is_empty() {
            // A rename: the old path, then the new.
            let Some(new) = tokens.get(i + 1) else { break };
            i += 2;
            new.to_vec()
        } else {
            path.to_vec()
        };
        let num = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok());
        let counts = match (num(a), num(r)) {
            (Some(a), Some(r)) => (a, r, false),
            _ => (0, 0, a == b"-" && r == b"-"),
        };
        out.insert(path, counts);
    }
    out
}

/// `--shortstat`: ` 3 files changed, 10 insertions(+), 2 deletions(-)` (either count may be
/// missing); `None` when it says nothing of files.
fn shortstat(s: &str) -> Option<Totals> {
    let mut totals = Totals::default();
    let mut files = false;
    for part in s.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next().and_then(|n| n.parse::<u64>().ok()), words.next()) else {
            continue;
        };
        if what.starts_with("file") {
            totals.files = n;
            files = true;
        } else if what.starts_with("insertion") {
            totals.added = n;
        } else if what.starts_with("deletion") {
            totals.removed = n;
        }
    }
    if files || s.trim().is_empty() {
        Some(totals)
    } else {
        None
    }
}

/// Reads `patch_script`'s data: the patch, cut at `max` bytes on a character's boundary, and why
/// when it was.
fn parse_patch(data: &[u8], max: usize, daemon: bool) -> (String, Option<String>) {
    if data.len() <= max {
        return (String::from_utf8_lossy(data).into_owned(), None);
    }
    // Cut before the character that starts at `max` (or, in bytes that are no UTF-8, at `max`).
    let mut end = max;
    while end > 0 && end + 4 > max && data[end] & 0b1100_0000 == 0b1000_0000 {
        end -= 1;
    }
    let kept = String::from_utf8_lossy(&data[..end]).into_owned();
    let why = if daemon {
        format!("the patch is longer than {} KiB: its first {} KiB shown", max / 1024, max / 1024)
    } else {
        format!(
            "the patch is longer than {} KiB, the most read from a sandbox without its daemon: its first {} KiB shown",
            max / 1024,
            max / 1024
        )
    };
    (kept, Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_is_read_from_gits_answer_and_stored_as_a_word() {
        let out = |stdout: &str, exit_code: i32| ExecOutput { stdout: stdout.into(), exit_code, ..Default::default() };
        let c = "a".repeat(40);
        assert_eq!(Base::read(&out(&format!("{c}\n"), 0)), Some(Base::Commit(c.clone())));
        assert_eq!(Base::read(&out("git=no\n", 0)), Some(Base::NoRepository));
        assert_eq!(Base::read(&out("", 1)), Some(Base::Unborn));
        assert_eq!(Base::read(&out("$(rm -rf /)\n", 0)), None, "not an object id");
        assert_eq!(Base::read(&out("", 2)), None, "a failure is no answer");
        let slow = ExecOutput { timed_out: true, ..out("", 1) };
        assert_eq!(Base::read(&slow), None);
        for b in [Base::Commit(c), Base::Unborn, Base::NoRepository] {
            assert_eq!(Base::from_stored(&b.stored()), Some(b));
        }
        assert_eq!(Base::from_stored("; rm -rf /"), None);
    }

    fn summary_data(raw: &[u8], num: &[u8], short: &str) -> Vec<u8> {
        let mut d = format!("{} {} {}\n", raw.len(), num.len(), short.len()).into_bytes();
        d.extend_from_slice(raw);
        d.extend_from_slice(num);
        d.extend_from_slice(short.as_bytes());
        d
    }

    const Z: &str = "0000000000000000000000000000000000000000";

    #[test]
    fn gits_lists_are_parsed_as_untrusted_bytes() {
        let raw = format!(
            ":000000 100644 {Z} {Z} A\0new\nline.txt\0:100644 100644 {Z} {Z} M\0f.txt\0:100644 000000 {Z} {Z} D\0gone\0\
             :100644 100644 {Z} {Z} R100\0old name\0new name\0:000000 100644 {Z} {Z} A\0bin.dat\0"
        );
        let num = "1\t0\tnew\nline.txt\x002\t1\tf.txt\x000\t3\tgone\x000\t0\t\0old name\0new name\0-\t-\tbin.dat\0";
        let s = parse_summary(
            &summary_data(raw.as_bytes(), num.as_bytes(), " 5 files changed, 3 insertions(+), 4 deletions(-)"),
            LIST_BYTES,
        );
        let f = |path: &str, old: Option<&str>, status, added, removed, binary| FileDiff {
            path: path.into(),
            old_path: old.map(String::from),
            status,
            added,
            removed,
            binary,
        };
        assert_eq!(
            s.files,
            vec![
                f("new\nline.txt", None, Status::Added, 1, 0, false),
                f("f.txt", None, Status::Modified, 2, 1, false),
                f("gone", None, Status::Deleted, 0, 3, false),
                f("new name", Some("old name"), Status::Renamed, 0, 0, false),
                f("bin.dat", None, Status::Added, 0, 0, true),
            ]
        );
        assert_eq!(s.totals, Totals { files: 5, added: 3, removed: 4 });
        assert_eq!(s.truncated, None);
        // Garbage is no entry, and no panic.
        let s = parse_summary(b"9 9 9\n:x\0\0\0\t\t\0", LIST_BYTES);
        assert!(s.files.is_empty());
        assert_eq!(parse_summary(b"", LIST_BYTES), Summary::default());
        assert_eq!(parse_summary(b"99999 0 0\nshort", LIST_BYTES), Summary::default());
    }

    #[test]
    fn lists_past_their_bounds_say_they_were_cut() {
        let mut raw = String::new();
        let mut num = String::new();
        for i in 0..=MAX_FILES {
            raw.push_str(&format!(":000000 100644 {Z} {Z} A\0f{i}\0"));
            num.push_str(&format!("1\t0\tf{i}\0"));
        }
        let s = parse_summary(
            &summary_data(raw.as_bytes(), num.as_bytes(), " 501 files changed, 501 insertions(+)"),
            LIST_BYTES,
        );
        assert_eq!(s.files.len(), MAX_FILES);
        assert_eq!(s.truncated.as_deref(), Some("more than 500 files: the first 500 shown"));
        assert_eq!(s.totals, Totals { files: 501, added: 501, removed: 0 }, "the totals are the whole diff's");
        // Cut by bytes mid-entry: the partial entry is dropped.
        let max = 3 * (raw.len() / (MAX_FILES + 1)) + 10;
        let cut = &raw.as_bytes()[..max + 1];
        let s = parse_summary(&summary_data(cut, b"", ""), max);
        assert_eq!(s.files.len(), 3, "{:?}", s.files);
        assert!(s.truncated.as_deref().is_some_and(|t| t.contains("the first 3 files shown")), "{:?}", s.truncated);
    }

    #[test]
    fn a_long_patch_is_cut_on_a_character_and_says_so() {
        let (p, t) = parse_patch("ab€".as_bytes(), 10, true);
        assert_eq!((p.as_str(), t), ("ab€", None));
        let (p, t) = parse_patch("ab€€".as_bytes(), 4, true);
        assert_eq!(p, "ab");
        assert!(t.is_some_and(|t| t.starts_with("the patch is longer than")));
    }

    #[test]
    fn paths_that_no_repository_file_has_are_refused() {
        for bad in ["", "/etc/passwd", "a/../../b", "..", "a\0b"] {
            assert!(matches!(check_path(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
        for ok in ["a/b.rs", "we ird/n\nl.txt", "..a", ".hidden"] {
            assert!(check_path(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn scripts_quote_what_they_are_given_and_never_use_what_is_not_an_id() {
        let s = patch_script("/w/it's", Some("not-an-id; rm -rf /"), "a'b", Some("c d"), 10);
        assert!(!s.contains("not-an-id"), "{s}");
        assert!(s.contains(r"':(top,literal)c d' ':(top,literal)a'\''b'"), "{s}");
        assert!(s.contains(r"'/w/it'\''s'"));
        let s = summary_script("/w", Some(&"c".repeat(40)), 100);
        assert!(s.contains(&format!("base='{}'", "c".repeat(40))) && s.contains("head -c 101"), "{s}");
    }

    #[test]
    fn a_scripts_answer_is_its_data_a_missing_repository_or_the_sandboxs_failure() {
        let out = |stdout: &str| ExecOutput { stdout: stdout.into(), ..Default::default() };
        assert_eq!(checked(out("diff=ok\n--\nx\0y"), "r").ok(), Some(Read::Ok(b"x\0y".to_vec())));
        assert_eq!(checked(out("git=no\n"), "r").ok(), Some(Read::Gone(Gone::NoRepository)));
        assert_eq!(checked(out("diff=no_base\n"), "r").ok(), Some(Read::Gone(Gone::NoBase)));
        let e = checked(out("diff=error: the work tree is gone\n"), "reading the diff").expect_err("a failure");
        assert!(
            matches!(&e, Error::Daemon(m) if m == "reading the diff failed (exit 0): diff=error: the work tree is gone"),
            "{e:?}"
        );
        let slow = ExecOutput { timed_out: true, ..out("") };
        assert!(matches!(checked(slow, "r"), Err(Error::Unavailable(_))));
    }

    #[test]
    fn shortstats() {
        assert_eq!(shortstat(" 1 file changed, 1 deletion(-)"), Some(Totals { files: 1, added: 0, removed: 1 }));
        assert_eq!(shortstat(""), Some(Totals::default()));
        assert_eq!(shortstat("garbage"), None);
    }
}
