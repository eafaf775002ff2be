//! A session's live picture: what its agent is doing now, the stages of its latest turn, the
//! files it changed, its commits and usage, and its new tokens over the last hour, folded from the
//! turn's events beside [`Summary`](crate::Summary) (which folds the same events into a run's
//! summary). The relay feeds it each recorded event and its turn's and job's state changes with
//! the times they were recorded at, and keeps one per session; everything here is a pure function
//! of those, and memory is bounded per picture.
use std::collections::{BTreeSet, VecDeque};

use serde::Serialize;
use serde_json::Value;

use crate::event::{Event, EventType};

/// The most stages a turn's timeline keeps (the oldest go first).
pub const MAX_STAGES: usize = 64;
/// The most distinct changed files a turn counts.
pub const MAX_FILES: usize = 1_000;
/// `now` is cut to this many characters, a command in it to `COMMAND_CHARS`.
pub const NOW_CHARS: usize = 120;
pub const COMMAND_CHARS: usize = 60;
/// `tokens_1h`: twelve buckets of five minutes.
pub const BUCKET_SECONDS: f64 = 300.0;
pub const BUCKETS: usize = 12;
/// Commits under way (a `git commit` started, its end not yet seen) kept per turn.
const MAX_PENDING_COMMITS: usize = 16;

/// Where a turn is in its work, by what it did: only ever set on a real signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Plan,
    Edit,
    Test,
    Pr,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Plan, Stage::Edit, Stage::Test, Stage::Pr];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Plan => "plan",
            Stage::Edit => "edit",
            Stage::Test => "test",
            Stage::Pr => "pr",
        }
    }
}

/// One stage of the timeline; `ended_at` is `None` while it is the current one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    pub stage: Stage,
    pub started_at: f64,
    pub ended_at: Option<f64>,
}

/// A stage that ended, for the estimates of stages to come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    pub stage: Stage,
    pub seconds: f64,
}

/// What a shell command is, for the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CommandKind {
    Other,
    /// Reads or searches (`rg`, `cat`, `git log`...): planning, before anything else.
    Look,
    /// `git commit`: counted, no stage of its own.
    Commit,
    /// A test runner or a linter.
    Test,
    /// `git push` or `gh pr ...`.
    Pr,
}

/// Tools that edit though no parser gives them the editing phase (the others are read from
/// `parse::tool_phase`, so a tool reads or edits here as it does in the events' phases).
const MORE_EDIT_TOOLS: &[&str] = &["apply_patch", "create_file"];
const SHELL_TOOLS: &[&str] = &["Bash", "run_shell_command", "shell", "exec_command", "local_shell"];
const LOOK_PROGRAMS: &[&str] =
    &["rg", "grep", "egrep", "fgrep", "ag", "ack", "find", "fd", "ls", "cat", "head", "tail", "tree", "wc", "less"];
const LINTERS: &[&str] = &[
    "ruff",
    "flake8",
    "pylint",
    "mypy",
    "pyright",
    "eslint",
    "tsc",
    "golangci-lint",
    "staticcheck",
    "shellcheck",
    "rubocop",
    "stylelint",
    "clippy-driver",
    "hadolint",
];

/// The arguments after the program that are not flags (and, for git, not `-C dir`/`-c k=v`).
fn args(words: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut it = words.iter().skip(1);
    while let Some(w) = it.next() {
        if w == "-C" || w == "-c" {
            it.next();
        } else if !w.starts_with('-') && !w.starts_with('+') {
            out.push(w.as_str());
        }
    }
    out
}

fn segment_kind(words: &[String]) -> CommandKind {
    let Some(first) = words.first() else { return CommandKind::Other };
    let a = args(words);
    let checks = || words.iter().any(|w| w == "--check");
    match crate::parse::base(first) {
        "git" => match a.first().copied() {
            Some("push") => CommandKind::Pr,
            Some("commit") => CommandKind::Commit,
            Some("log" | "show" | "diff" | "status" | "grep" | "blame") => CommandKind::Look,
            _ => CommandKind::Other,
        },
        "gh" if a.first() == Some(&"pr") => CommandKind::Pr,
        "cargo" => match a.first().copied() {
            Some("clippy") => CommandKind::Test,
            Some("fmt") if checks() => CommandKind::Test,
            _ => CommandKind::Other,
        },
        "go" if a.first() == Some(&"vet") => CommandKind::Test,
        "npm" | "yarn" | "pnpm" if a.contains(&"lint") => CommandKind::Test,
        "black" | "prettier" | "rustfmt" | "gofmt" if checks() || words.iter().any(|w| w == "-l") => CommandKind::Test,
        p if LINTERS.contains(&p) => CommandKind::Test,
        p if LOOK_PROGRAMS.contains(&p) => CommandKind::Look,
        _ => CommandKind::Other,
    }
}

/// What a shell command is: the strongest of what its segments are (a push outranks the tests
/// run before it).
fn command_kind(command: &str) -> CommandKind {
    let mut kind = crate::parse::commands(command).iter().map(|w| segment_kind(w)).max().unwrap_or(CommandKind::Other);
    if crate::parse::runs_tests(command) {
        kind = kind.max(CommandKind::Test);
    }
    kind
}

/// `s` cut to `n` characters, with an ellipsis when cut; newlines become spaces.
pub fn cut(s: &str, n: usize) -> String {
    let flat: String = s.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if !crate::cut::chars(&flat, n).1 {
        return flat;
    }
    let mut out = crate::cut::chars(&flat, n.saturating_sub(1)).0.to_string();
    out.push('…');
    out
}

/// A tool call as `now` shows it: its name and what it works on.
fn call(name: &str, summary: &str) -> String {
    if summary.is_empty() {
        cut(name, NOW_CHARS)
    } else {
        cut(&format!("{name} {summary}"), NOW_CHARS)
    }
}

/// What one event says for the picture.
#[derive(Debug, Default, PartialEq)]
struct Signal {
    /// The stage it puts the turn in (`Plan` counts only before any other stage).
    stage: Option<Stage>,
    /// The humanised event, when it is one `now` shows.
    now: Option<String>,
    /// Files it changes.
    files: Vec<String>,
    /// A tool call that commits: its tool id (counted when it ends well).
    commit: Option<String>,
    /// A tool call that ended: its tool id and whether it went well.
    ended: Option<(String, bool)>,
    /// The agent's own progress report: its percentage (or none said).
    progress: Option<Option<u8>>,
}

/// A string field that says something: an empty one is as good as absent.
fn str_of<'a>(event: &'a Event, key: &str) -> Option<&'a str> {
    event.get(key).as_str().filter(|s| !s.is_empty())
}

/// What a tool is, for the stages: reading and editing as the parsers' phases have it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tool {
    Reads,
    Edits,
    Shell,
    Other,
}

fn tool(name: &str) -> Tool {
    match crate::parse::tool_phase(name) {
        Some("reading" | "searching") => Tool::Reads,
        Some("editing") => Tool::Edits,
        _ if MORE_EDIT_TOOLS.contains(&name) => Tool::Edits,
        _ if SHELL_TOOLS.contains(&name) => Tool::Shell,
        _ => Tool::Other,
    }
}

/// What an event (redacted already) says, by hangar's reading of it.
fn signal(event: &Event) -> Signal {
    let mut s = Signal::default();
    match event.kind {
        EventType::ToolStart => {
            let name = str_of(event, "name").unwrap_or("tool");
            let summary = str_of(event, "summary").unwrap_or_default();
            match tool(name) {
                Tool::Reads => {
                    s.stage = Some(Stage::Plan);
                    s.now = Some(call(name, summary));
                }
                Tool::Edits => {
                    let files: Vec<String> = event.files().into_iter().map(str::to_string).collect();
                    s.stage = Some(Stage::Edit);
                    let shown = files.first().map(String::as_str).unwrap_or(summary);
                    s.now = Some(cut(&format!("editing {}", cut(shown, COMMAND_CHARS)), NOW_CHARS));
                    s.files = files;
                }
                Tool::Shell => {
                    match command_kind(summary) {
                        CommandKind::Pr => s.stage = Some(Stage::Pr),
                        CommandKind::Test => s.stage = Some(Stage::Test),
                        CommandKind::Look => s.stage = Some(Stage::Plan),
                        CommandKind::Commit => s.commit = str_of(event, "tool_id").map(str::to_string),
                        CommandKind::Other => {}
                    }
                    s.now = Some(format!("running {}", cut(summary, COMMAND_CHARS)));
                }
                Tool::Other => s.now = Some(call(name, summary)),
            }
            // A subagent's call says so: the person sees whose work it is.
            if str_of(event, "parent_tool_id").is_some() {
                s.now = s.now.map(|n| cut(&format!("subagent: {n}"), NOW_CHARS));
            }
        }
        EventType::ToolEnd => {
            if let Some(id) = str_of(event, "tool_id") {
                s.ended = Some((id.to_string(), event.get("ok").as_bool() == Some(true)));
            }
        }
        EventType::Phase => {
            s.stage = match str_of(event, "phase") {
                Some("editing") => Some(Stage::Edit),
                Some("running_tests") => Some(Stage::Test),
                Some("reading" | "searching") => Some(Stage::Plan),
                _ => None,
            }
        }
        EventType::TestResult => {
            s.stage = Some(Stage::Test);
            let count = |k: &str| event.get(k).as_u64();
            let parts: Vec<String> = [("passed", count("passed")), ("failed", count("failed"))]
                .into_iter()
                .filter_map(|(w, n)| n.map(|n| format!("{n} {w}")))
                .collect();
            s.now =
                Some(if parts.is_empty() { "tests ran".to_string() } else { format!("tests: {}", parts.join(", ")) });
        }
        EventType::AgentProgress => {
            let pct = event.get("pct").as_f64().filter(|p| p.is_finite()).map(|p| p.clamp(0.0, 100.0) as u8);
            s.progress = Some(pct);
            s.now = str_of(event, "text").map(|t| cut(t, NOW_CHARS));
        }
        EventType::InputRequested => s.now = Some("waiting for input".to_string()),
        _ => {}
    }
    s
}

/// New tokens in five-minute buckets, at most an hour's worth.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    /// (bucket number since the epoch, tokens), oldest first, at most `BUCKETS`.
    slots: VecDeque<(i64, u64)>,
}

fn bucket(ts: f64) -> i64 {
    (ts / BUCKET_SECONDS).floor() as i64
}

impl Buckets {
    pub fn add(&mut self, ts: f64, tokens: u64) {
        if tokens == 0 || !ts.is_finite() {
            return;
        }
        let b = bucket(ts);
        match self.slots.iter().position(|(i, _)| *i >= b) {
            Some(p) if self.slots[p].0 == b => self.slots[p].1 = self.slots[p].1.saturating_add(tokens),
            Some(p) => self.slots.insert(p, (b, tokens)),
            None => self.slots.push_back((b, tokens)),
        }
        while self.slots.len() > BUCKETS {
            self.slots.pop_front();
        }
    }

    /// Adds these buckets to `out`, the last hour as of `now` (oldest first, the last being the
    /// current five minutes).
    pub fn add_to(&self, out: &mut [u64; BUCKETS], now: f64) {
        let current = bucket(now);
        for (b, n) in &self.slots {
            let age = current - b;
            if (0..BUCKETS as i64).contains(&age) {
                let i = BUCKETS - 1 - age as usize;
                out[i] = out[i].saturating_add(*n);
            }
        }
    }
}

/// A session's picture. Per turn: `now` and the rest; across turns: the token buckets and the
/// model last reported.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// The turn the per-turn fields describe.
    pub turn_id: String,
    pub now: Option<String>,
    pub last_activity_at: Option<f64>,
    pub stages: VecDeque<Span>,
    pub stage_pct: Option<u8>,
    files: BTreeSet<String>,
    pub commits: u64,
    pending_commits: Vec<String>,
    /// The latest usage event of the turn (its running totals).
    pub usage: Option<Value>,
    /// Tokens of the turn already put in buckets.
    counted: u64,
    pub buckets: Buckets,
    pub model: Option<String>,
}

impl LiveState {
    /// Points the picture at `turn_id`: a new turn starts with an empty timeline, files, commits
    /// and usage (the buckets and the model stay).
    pub fn for_turn(&mut self, turn_id: &str) {
        if self.turn_id != turn_id {
            *self = LiveState {
                turn_id: turn_id.to_string(),
                buckets: std::mem::take(&mut self.buckets),
                model: self.model.take(),
                ..LiveState::default()
            };
        }
    }

    pub fn files_changed(&self) -> u64 {
        self.files.len() as u64
    }

    /// The stage now: the last span, while it is open.
    pub fn stage(&self) -> Option<&Span> {
        self.stages.back().filter(|s| s.ended_at.is_none())
    }

    fn set_now(&mut self, now: String, ts: f64) {
        self.now = Some(now);
        self.last_activity_at = Some(ts);
    }

    /// Enters `stage` at `ts` (a plan only while nothing else happened); the stage it ends.
    fn enter(&mut self, stage: Stage, ts: f64) -> Option<Finished> {
        if stage == Stage::Plan && !self.stages.is_empty() {
            return None;
        }
        if self.stage().is_some_and(|s| s.stage == stage) {
            return None;
        }
        let finished = self.close(ts);
        self.stage_pct = None;
        self.stages.push_back(Span { stage, started_at: ts, ended_at: None });
        while self.stages.len() > MAX_STAGES {
            self.stages.pop_front();
        }
        finished
    }

    /// Ends the open stage at `ts`.
    fn close(&mut self, ts: f64) -> Option<Finished> {
        let span = self.stages.back_mut().filter(|s| s.ended_at.is_none())?;
        span.ended_at = Some(ts.max(span.started_at));
        Some(Finished { stage: span.stage, seconds: (ts - span.started_at).max(0.0) })
    }

    fn usage(&mut self, event: &Event, ts: f64) {
        let n = |k: &str| event.get(k).as_u64().unwrap_or(0);
        // New tokens: input, output and cache writes; cache reads are not new work.
        let total = n("input_tokens")
            .saturating_add(n("output_tokens"))
            .saturating_add(n("cache_write_tokens"))
            .saturating_add(n("cache_creation_tokens"));
        // Each usage event carries the turn's running totals; a smaller total is a new count.
        let added = if total >= self.counted { total - self.counted } else { total };
        self.counted = total;
        self.buckets.add(ts, added);
        if let Some(mut o) = event.data.as_object().cloned() {
            o.remove("source");
            self.usage = Some(Value::Object(o));
        }
    }

    /// Folds in one recorded event of the turn; the stage it ended, if any.
    pub fn apply(&mut self, event: &Event, ts: f64) -> Option<Finished> {
        match event.kind {
            EventType::Usage => self.usage(event, ts),
            EventType::RunStarted => {
                if let Some(m) = str_of(event, "model") {
                    self.model = Some(cut(m, 80));
                }
            }
            _ => {}
        }
        let s = signal(event);
        if let Some(now) = s.now {
            self.set_now(now, ts);
        }
        for f in s.files {
            if self.files.len() < MAX_FILES {
                self.files.insert(f);
            }
        }
        if let Some(id) = s.commit {
            if self.pending_commits.len() >= MAX_PENDING_COMMITS {
                self.pending_commits.remove(0);
            }
            self.pending_commits.push(id);
        }
        if let Some((id, ok)) = s.ended {
            if let Some(p) = self.pending_commits.iter().position(|c| *c == id) {
                self.pending_commits.remove(p);
                if ok {
                    self.commits += 1;
                }
            }
        }
        let finished = s.stage.and_then(|stage| self.enter(stage, ts));
        if let Some(pct) = s.progress {
            self.stage_pct = pct;
        }
        finished
    }

    /// The turn moved to `to` (a `run.state`): starting, waiting or ended; the stage it ended.
    pub fn turn_state(&mut self, to: &str, reason: Option<&str>, terminal: bool, ts: f64) -> Option<Finished> {
        match to {
            "starting" => self.set_now("starting".to_string(), ts),
            "waiting_input" => self.set_now("waiting for input".to_string(), ts),
            _ if terminal => {
                let now = match reason {
                    Some(r) if to != "succeeded" => format!("turn {to}: {}", cut(r, COMMAND_CHARS)),
                    _ => format!("turn {to}"),
                };
                self.set_now(now, ts);
                return self.close(ts);
            }
            _ => {}
        }
        None
    }

    /// The job moved to `to`: hangar itself verifies (the test stage) or ended it; the stage it
    /// ended.
    pub fn job_state(&mut self, to: &str, verify: Option<&str>, terminal: bool, ts: f64) -> Option<Finished> {
        if to == "verifying" {
            let now = match verify {
                Some(v) => format!("verifying: {}", cut(v, COMMAND_CHARS)),
                None => "verifying".to_string(),
            };
            self.set_now(now, ts);
            let finished = self.close(ts);
            self.stages.push_back(Span { stage: Stage::Test, started_at: ts, ended_at: None });
            while self.stages.len() > MAX_STAGES {
                self.stages.pop_front();
            }
            self.stage_pct = None;
            return finished;
        }
        if terminal {
            self.set_now(format!("job {to}"), ts);
            return self.close(ts);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A fixture's golden events (what the parsers make of its log).
    fn golden(name: &str) -> Vec<Event> {
        let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn ev(kind: EventType, data: Value) -> Event {
        Event { kind, data }
    }

    /// Replays a golden file a second an event; the picture and the stages that ended.
    fn replay(name: &str) -> (LiveState, Vec<Finished>) {
        let mut live = LiveState::default();
        live.for_turn("turn_1");
        let mut done = Vec::new();
        for (i, event) in golden(name).iter().enumerate() {
            done.extend(live.apply(event, 1000.0 + i as f64));
        }
        (live, done)
    }

    #[test]
    fn commands_are_classified_by_what_they_run() {
        for (cmd, kind) in [
            ("git push origin HEAD", CommandKind::Pr),
            ("cd repo && git -C . push -u origin fix", CommandKind::Pr),
            ("gh pr create --fill", CommandKind::Pr),
            ("uv run pytest -q tests/", CommandKind::Test),
            ("cd rust && cargo test 2>&1 | tail -15", CommandKind::Test),
            ("cargo clippy --all-targets -- -D warnings", CommandKind::Test),
            ("ruff check .", CommandKind::Test),
            ("npm run lint", CommandKind::Test),
            ("cargo fmt --check", CommandKind::Test),
            ("cargo fmt", CommandKind::Other),
            ("git add -A && git commit -m 'x'", CommandKind::Commit),
            ("rg -n parse_config src", CommandKind::Look),
            ("git log --oneline", CommandKind::Look),
            ("sleep 600", CommandKind::Other),
            ("cargo test && git push", CommandKind::Pr),
            ("", CommandKind::Other),
        ] {
            assert_eq!(command_kind(cmd), kind, "{cmd}");
        }
    }

    #[test]
    fn a_real_turn_goes_plan_edit_test_from_its_own_signals() {
        let (live, done) = replay("claude-long-turn.events.jsonl");
        let stages: Vec<Stage> = live.stages.iter().map(|s| s.stage).collect();
        assert_eq!(stages, [Stage::Plan, Stage::Edit, Stage::Test, Stage::Edit, Stage::Test]);
        assert_eq!(
            done.iter().map(|f| f.stage).collect::<Vec<_>>(),
            [Stage::Plan, Stage::Edit, Stage::Test, Stage::Edit]
        );
        assert_eq!(live.stage().map(|s| s.stage), Some(Stage::Test));
        assert_eq!(live.files_changed(), 1, "one file edited twice");
        assert_eq!(live.commits, 1, "the git commit ended well");
        assert_eq!(live.model.as_deref(), Some("claude-sonnet-5"));
        assert_eq!(live.usage.as_ref().unwrap()["output_tokens"], json!(3912));
        assert!(live.usage.as_ref().unwrap().get("source").is_none());
        assert!(live.now.as_deref().is_some_and(|n| n.starts_with("running git add -A")), "{:?}", live.now);
    }

    #[test]
    fn a_command_that_reads_first_is_planning_and_a_later_read_is_not() {
        let (live, _) = replay("codex-out-of-order.events.jsonl");
        let stages: Vec<Stage> = live.stages.iter().map(|s| s.stage).collect();
        assert_eq!(stages, [Stage::Plan, Stage::Test, Stage::Edit]);
        assert_eq!(live.files_changed(), 2);

        let mut live = LiveState::default();
        live.apply(&ev(EventType::ToolStart, json!({"name": "Edit", "file": "a.rs", "tool_id": "1"})), 1.0);
        live.apply(&ev(EventType::ToolStart, json!({"name": "Read", "file": "b.rs", "tool_id": "2"})), 2.0);
        assert_eq!(live.stages.len(), 1, "a read after an edit is no plan");
        assert_eq!(live.now.as_deref(), Some("Read"), "the tool call is what it is doing");
    }

    #[test]
    fn a_subagents_call_says_whose_it_is() {
        let s = signal(&ev(
            EventType::ToolStart,
            json!({"name": "Bash", "summary": "pwd", "tool_id": "2", "parent_tool_id": "1"}),
        ));
        assert_eq!(s.now.as_deref(), Some("subagent: running pwd"));
        let s = signal(&ev(EventType::ToolStart, json!({"name": "Bash", "summary": "pwd", "tool_id": "3"})));
        assert_eq!(s.now.as_deref(), Some("running pwd"));
    }

    #[test]
    fn no_signal_no_stage() {
        let (live, _) = replay("claude-stream-json-executor.events.jsonl");
        assert!(live.stages.is_empty() && live.stage().is_none());
        assert_eq!(live.files_changed(), 0);
    }

    #[test]
    fn a_push_and_progress_and_the_turn_s_end() {
        let mut live = LiveState::default();
        live.for_turn("t");
        live.apply(
            &ev(EventType::ToolStart, json!({"name": "Bash", "summary": "git push origin fix", "tool_id": "1"})),
            10.0,
        );
        assert_eq!(live.stage().map(|s| s.stage), Some(Stage::Pr));
        assert_eq!(live.now.as_deref(), Some("running git push origin fix"));
        live.apply(
            &ev(EventType::AgentProgress, json!({"text": "opening the PR", "pct": 40, "source": "agent"})),
            11.0,
        );
        assert_eq!((live.stage_pct, live.now.as_deref()), (Some(40), Some("opening the PR")));
        assert_eq!(live.last_activity_at, Some(11.0));
        let f = live.turn_state("failed", Some("exit_code"), true, 20.0).expect("the pr stage ended");
        assert_eq!((f.stage, f.seconds), (Stage::Pr, 10.0));
        assert_eq!(live.now.as_deref(), Some("turn failed: exit_code"));
        assert!(live.stage().is_none() && live.stages[0].ended_at == Some(20.0));

        // Hangar verifying is the test stage; the job's end closes it.
        live.job_state("verifying", Some("cargo test"), false, 21.0);
        assert_eq!(live.stage().map(|s| s.stage), Some(Stage::Test));
        assert_eq!(live.now.as_deref(), Some("verifying: cargo test"));
        assert_eq!(live.job_state("succeeded", None, true, 25.0).map(|f| f.seconds), Some(4.0));

        // A new turn starts afresh, keeping its tokens' history.
        live.apply(&ev(EventType::Usage, json!({"input_tokens": 10, "output_tokens": 5})), 26.0);
        live.for_turn("t2");
        assert!(live.stages.is_empty() && live.now.is_none() && live.usage.is_none());
        let mut b = [0; BUCKETS];
        live.buckets.add_to(&mut b, 26.0);
        assert_eq!(b[BUCKETS - 1], 15);
    }

    #[test]
    fn tokens_are_the_increase_of_running_totals_in_five_minute_buckets() {
        let mut live = LiveState::default();
        let t0 = 1_000_000.0 * BUCKET_SECONDS;
        live.apply(
            &ev(EventType::Usage, json!({"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 5000})),
            t0 + 1.0,
        );
        live.apply(&ev(EventType::Usage, json!({"input_tokens": 150, "output_tokens": 20})), t0 + 2.0);
        live.apply(&ev(EventType::Usage, json!({"input_tokens": 400, "output_tokens": 0})), t0 + 400.0);
        // A smaller total: a new count (a new turn's), taken whole.
        live.apply(&ev(EventType::Usage, json!({"input_tokens": 7})), t0 + 401.0);
        let mut b = [0; BUCKETS];
        live.buckets.add_to(&mut b, t0 + 401.0);
        assert_eq!(b[BUCKETS - 2..], [170, 230 + 7]);
        assert_eq!(b.iter().sum::<u64>(), 407);
        // An hour on, they are gone.
        let mut later = [0; BUCKETS];
        live.buckets.add_to(&mut later, t0 + 3_900.0);
        assert_eq!(later, [0; BUCKETS]);
        // Never more than twelve kept.
        let mut bk = Buckets::default();
        for i in 0..100 {
            bk.add(t0 + i as f64 * BUCKET_SECONDS, 1);
        }
        assert_eq!(bk.slots.len(), BUCKETS);
    }

    #[test]
    fn timelines_and_files_are_bounded() {
        let mut live = LiveState::default();
        for i in 0..(MAX_STAGES * 2) {
            let stage = if i % 2 == 0 { "editing" } else { "running_tests" };
            live.apply(&ev(EventType::Phase, json!({ "phase": stage })), i as f64);
            live.apply(&ev(EventType::ToolStart, json!({"name": "Write", "file": format!("f{i}")})), i as f64);
        }
        assert_eq!(live.stages.len(), MAX_STAGES);
        for i in 0..(MAX_FILES + 10) {
            live.apply(&ev(EventType::ToolStart, json!({"name": "Write", "file": format!("g{i}")})), 0.0);
        }
        assert_eq!(live.files_changed(), MAX_FILES as u64);
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("a\nb", 4), "a b");
    }
}
