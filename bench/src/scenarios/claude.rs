//! Scenario 10, the real Claude Code's lines (issue 37, item 7): the delay from the real CLI's
//! printing a line to hangar's recording its event, beside the same CLI's lines read straight
//! from a pipe (the floor) and from a pty (whether stream-json is block-buffered on a pipe).
//!
//! The CLI (`claude -p --output-format stream-json --verbose --session-id ID`, the built-in
//! `claude-code` profile's command, as scripts/agent-clis installs it) talks to the scripted
//! model stand-in (`hangar_e2e::model`). Each turn is `steps` answers: a `Read` of a file of its
//! own (every other one after a sentence of text), then a closing text. The stand-in notes when
//! it handed each answer's last bytes to the connection (`answered`); the CLI then prints the
//! answer's first line (an `assistant` line naming the answer, `msg_stand_in_NNNN`), and the
//! delay measured is from that instant to the line's arrival. The CLI's own work (parsing the
//! answer, its event loop) is in every mode's figure alike; what differs is the way out:
//!
//! - `pipe`: the command run by the bench, stdout and stderr on one pipe, read by a thread that
//!   stamps each `read` as it returns (the floor: what the same work costs without hangar);
//! - `pty`: the same with stdout and stderr on a pty in raw mode;
//! - `hangar`: a session of the built-in `claude-code` harness on the relay's local sandbox
//!   (the relay as root: the uid split), the line's first event's `ts` (recorded) and its
//!   arrival at an SSE follower of `events/stream`.
//!
//! Modes are interleaved (run 1 of each, then run 2...) after one unmeasured turn each. Lines are
//! mapped to answers by the id they name; hangar's events to lines by hangar-agents' parser over
//! the turn's log (the events served must be exactly those, in order), as scenario 6 does.

use std::{
    collections::HashMap,
    ffi::CStr,
    io::{Read, Write},
    os::fd::{FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use hangar_agents::{Format, Parser};
use hangar_e2e::{
    clis,
    files::Scratch,
    model::{Model, Recorded, Step},
    relay::ADMIN,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    error::{fail, IoContext, Result},
    scenarios::turns::{follow_turn, Followed, Seen},
    stats::{now, round3, Summary},
    world::RelayWorld,
};

/// A turn's limit: the CLI's start (about a second) and `steps` quick answers.
const TURN_LIMIT: Duration = Duration::from_secs(120);
/// The prompt, on the CLI's stdin in every mode.
const PROMPT: &str = "Read the step files in order.";
/// The secrets the CLI reads (hangar mode), as the real-CLI tests set them.
const SECRETS: [&str; 3] = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"];
const API_KEY: &str = "sk-ant-stand-in-key";
/// One retry at most (a secret's value is 8 bytes at least; the CLI reads this as 1).
const MAX_RETRIES: &str = "00000001";

pub struct Config {
    pub runs: usize,
    pub steps: usize,
    pub cli: PathBuf,
}

impl Config {
    /// The full run's sizes, or quick mode's; `None` (after a notice) in quick mode without the
    /// CLI, an error naming what is missing in a full run.
    pub fn new(quick: bool) -> Result<Option<Config>> {
        let (runs, steps) = if quick { (1, 10) } else { (10, 40) };
        match clis::claude() {
            Some(cli) => Ok(Some(Config { runs, steps, cli })),
            None if quick => {
                eprintln!("hangar-bench: claude: skipped in quick mode: Claude Code is not installed (scripts/agent-clis, or HANGAR_CLAUDE_BIN)");
                Ok(None)
            }
            None => Err(fail(
                "the claude scenario",
                "needs the real Claude Code: run scripts/agent-clis, or name it with HANGAR_CLAUDE_BIN",
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Pipe,
    Pty,
    Hangar,
}

const MODES: [Mode; 3] = [Mode::Pipe, Mode::Pty, Mode::Hangar];

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Pipe => "pipe",
            Mode::Pty => "pty",
            Mode::Hangar => "hangar",
        }
    }
}

/// How a way out delivered the CLI's output: a burst is several lines in one `read`.
#[derive(Debug, Clone, Serialize)]
pub struct Reads {
    /// Every line of the measured turns, and the `read`s that brought them.
    pub lines: usize,
    pub reads: usize,
    /// Lines that came in a `read` with another line, and the most lines one `read` brought.
    pub lines_sharing_a_read: usize,
    pub max_lines_per_read: usize,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub key: &'static str,
    pub label: &'static str,
    /// From the stand-in's sending an answer to its first line's arrival (or event), ms.
    pub delay_ms: Summary,
    /// This row's p50, p95 and p99 minus the pipe's (the floor), ms.
    pub over_pipe_ms: [f64; 3],
    /// For the rows read by the bench itself: how the lines came.
    pub reads: Option<Reads>,
    /// From the CLI's start (the request, for hangar) to its last line, s, a sample per run.
    pub turn_seconds: Summary,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub cli: String,
    pub version: String,
    pub runs: usize,
    /// Answers per turn (the measured lines per turn).
    pub steps: usize,
    /// The turns' lines (the CLI's whole output, p50 over the runs).
    pub lines_per_turn: usize,
    /// Whether hangar's turns ran with the uid split.
    pub split: bool,
    pub rows: Vec<Row>,
}

/// The answer an `assistant` line names (`"message": {"id": "msg_stand_in_0007"}`), if it is one.
pub fn answer_of(line: &str) -> Option<u64> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    if v["type"] != "assistant" {
        return None;
    }
    v["message"]["id"].as_str()?.strip_prefix("msg_stand_in_")?.parse().ok()
}

/// Whether a line is the turn's `result`, the CLI's last.
pub fn is_result(line: &str) -> bool {
    serde_json::from_str::<Value>(line.trim()).is_ok_and(|v| v["type"] == "result")
}

/// The lines that are the first to name an answer: `(line index, answer)`, in order.
pub fn first_lines<S: AsRef<str>>(lines: &[S]) -> Vec<(usize, u64)> {
    let mut seen = std::collections::HashSet::new();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| answer_of(l.as_ref()).map(|a| (i, a)))
        .filter(|(_, a)| seen.insert(*a))
        .collect()
}

/// Each scripted answer's delay, ms: when its first line was seen (`at`, by line index) minus
/// when the answer was sent. Fails unless every answer of `answered` has exactly one first line,
/// every first line names one of them, and each was seen after its answer was sent.
pub fn delays(what: &str, first: &[(usize, u64)], at: &[Option<f64>], answered: &[(u64, f64)]) -> Result<Vec<f64>> {
    let sent: HashMap<u64, f64> = answered.iter().copied().collect();
    if first.len() != answered.len() {
        return Err(fail(what, format!("{} answers made {} first lines", answered.len(), first.len())));
    }
    let mut out = Vec::new();
    for &(line, answer) in first {
        let sent = sent
            .get(&answer)
            .ok_or_else(|| fail(what, format!("line {} names answer {answer}, not one of this turn's", line + 1)))?;
        let seen = at
            .get(line)
            .copied()
            .flatten()
            .ok_or_else(|| fail(what, format!("line {} (answer {answer}) was never seen", line + 1)))?;
        if seen < *sent {
            return Err(fail(
                what,
                format!("line {} (answer {answer}) seen at {seen}, before its answer was sent at {sent}", line + 1),
            ));
        }
        out.push((seen - sent) * 1000.0);
    }
    Ok(out)
}

/// The `(ts, arrival)` of each line's first event, by line, given the events each line makes
/// (`expected`, from the parser) and the events served in order; `None` for a line that makes
/// none. Fails unless the events served are exactly the expected ones, in order.
pub fn events_by_line(what: &str, expected: &[Vec<Value>], served: &[Seen]) -> Result<Vec<Option<(f64, f64)>>> {
    let want: usize = expected.iter().map(Vec::len).sum();
    if served.len() != want {
        return Err(fail(what, format!("{} events, want {want} (one missing or repeated)", served.len())));
    }
    let mut out = Vec::new();
    let mut next = 0;
    for (line, events) in expected.iter().enumerate() {
        for (part, e) in events.iter().enumerate() {
            let got = &served[next + part];
            if got.kind != e["type"] || got.data != e["data"] {
                return Err(fail(
                    what,
                    format!("event {} (line {}): got {} {}, want {e}", next + part + 1, line + 1, got.kind, got.data),
                ));
            }
        }
        out.push(served.get(next).filter(|_| !events.is_empty()).map(|s| (s.ts, s.at)));
        next += events.len();
    }
    Ok(out)
}

/// The script of one turn of `steps` answers reading the files in `dir`: answer i reads
/// `step-i.txt` (odd ones after a sentence), the last one is a closing text.
fn script(dir: &str, steps: usize) -> Vec<Step> {
    let read = |i: usize| json!({"file_path": format!("{dir}/step-{i}.txt")});
    let mut s: Vec<Step> = (0..steps.saturating_sub(1))
        .map(|i| {
            if i % 2 == 0 {
                Step::tool("Read", read(i))
            } else {
                Step::Reply {
                    text: Some(format!("Step {i}: the next file.")),
                    tools: vec![hangar_e2e::model::ToolCall { name: "Read".into(), input: read(i) }],
                }
            }
        })
        .collect();
    s.push(Step::text("All the step files are read."));
    s
}

/// The scripted answers recorded from `from` on: `(answer, sent at)`. Fails on one not sent.
fn answered_since(what: &str, requests: &[Recorded], from: usize) -> Result<Vec<(u64, f64)>> {
    requests
        .iter()
        .skip(from)
        .filter(|r| r.scripted)
        .map(|r| match (r.answer, r.answered) {
            (Some(a), Some(t)) => Ok((a, t)),
            _ => Err(fail(what, format!("a request to {} was not answered", r.path))),
        })
        .collect()
}

/// A v4-shaped id for `--session-id` (the bench has no UUID crate; it needs only to be unique).
fn session_id(n: usize) -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let pid = u128::from(std::process::id());
    let x = t ^ (pid << 64) ^ ((n as u128) << 96);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (x >> 96) as u32,
        (x >> 80) as u16,
        (x >> 68) as u16 & 0xfff,
        (x >> 56) as u16 & 0xfff,
        x as u64 & 0xffff_ffff_ffff
    )
}

/// The lines one turn printed on a way out the bench reads: each with its arrival and the
/// number of the `read` that brought it.
#[derive(Default)]
struct Printed {
    lines: Vec<String>,
    at: Vec<f64>,
    read_no: Vec<usize>,
    started: f64,
}

impl Printed {
    fn reads(&self) -> Reads {
        let mut per_read: HashMap<usize, usize> = HashMap::new();
        for r in &self.read_no {
            *per_read.entry(*r).or_default() += 1;
        }
        Reads {
            lines: self.lines.len(),
            reads: per_read.len(),
            lines_sharing_a_read: per_read.values().filter(|n| **n > 1).sum(),
            max_lines_per_read: per_read.values().copied().max().unwrap_or(0),
        }
    }
}

fn add_reads(a: &mut Option<Reads>, b: Reads) {
    match a {
        None => *a = Some(b),
        Some(a) => {
            a.lines += b.lines;
            a.reads += b.reads;
            a.lines_sharing_a_read += b.lines_sharing_a_read;
            a.max_lines_per_read = a.max_lines_per_read.max(b.max_lines_per_read);
        }
    }
}

/// A pty pair, the replica in raw mode (no echo, no `\n` to `\r\n`) and 200 columns wide.
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: plain libc calls on descriptors this function owns; each result is checked.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let master = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(m, name.as_mut_ptr(), name.len()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = libc::open(CStr::from_ptr(name.as_ptr()).as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let replica = OwnedFd::from_raw_fd(s);
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(s, &mut t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::cfmakeraw(&mut t);
        if libc::tcsetattr(s, libc::TCSANOW, &t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ws = libc::winsize { ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        if libc::ioctl(s, libc::TIOCSWINSZ, &ws) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((master, replica))
    }
}

/// Runs the CLI once with its output on a pipe or a pty, read by a thread that stamps each
/// `read`; its lines, until the `result` line.
fn floor_turn(mode: Mode, cli: &Path, home: &Path, cwd: &Path, url: &str, n: usize) -> Result<Printed> {
    let what = format!("claude on a {}", mode.key());
    let (reader, out): (std::fs::File, OwnedFd) = match mode {
        Mode::Pty => {
            let (m, r) = open_pty().ctx("opening a pty")?;
            (std::fs::File::from(m), r)
        }
        _ => {
            let (r, w) = std::io::pipe().ctx("making a pipe")?;
            (std::fs::File::from(OwnedFd::from(r)), OwnedFd::from(w))
        }
    };
    let dir = cli.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display());
    let mut cmd = Command::new(cli);
    cmd.args(["-p", "--output-format", "stream-json", "--verbose", "--session-id", &session_id(n)])
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ANTHROPIC_BASE_URL", url)
        .env("CLAUDE_CODE_MAX_RETRIES", MAX_RETRIES)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out.try_clone().ctx("duplicating the way out")?))
        .stderr(Stdio::from(out));
    let started = now();
    let mut child = cmd.spawn().ctx(format!("starting {}", cli.display()))?;
    // The command holds the way out's writing ends: dropped, only the CLI's remain.
    drop(cmd);
    let (tx, rx) = mpsc::channel::<(String, f64, usize)>();
    std::thread::spawn(move || {
        let mut reader = reader;
        let mut buf = vec![0u8; 256 * 1024];
        let mut partial = Vec::new();
        let mut read_no = 0;
        // A pty's reader gets EIO once the last writer is gone: the end, like a pipe's 0.
        while let Ok(n) = reader.read(&mut buf) {
            let at = now();
            if n == 0 {
                break;
            }
            read_no += 1;
            partial.extend_from_slice(&buf[..n]);
            while let Some(end) = partial.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                if tx.send((String::from_utf8_lossy(&line).trim_end().to_string(), at, read_no)).is_err() {
                    return;
                }
            }
        }
    });
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(format!("{PROMPT}\n").as_bytes()).ctx(format!("{what}: writing the prompt"))?;
    }
    let mut p = Printed { started, ..Printed::default() };
    let deadline = Instant::now() + TURN_LIMIT;
    let ended = loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((line, at, read_no)) => {
                let last = is_result(&line);
                p.lines.push(line);
                p.at.push(at);
                p.read_no.push(read_no);
                if last {
                    break Ok(());
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err("its output ended without a result line"),
            Err(mpsc::RecvTimeoutError::Timeout) => break Err("no result line in time"),
        }
    };
    let status = loop {
        match child.try_wait().ctx(format!("{what}: waiting"))? {
            Some(s) => break Some(s),
            None if Instant::now() >= deadline || ended.is_err() => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    if let Err(e) = ended {
        let tail: Vec<&String> = p.lines.iter().rev().take(3).collect();
        return Err(fail(&what, format!("{e}; last lines: {tail:?}")));
    }
    match status {
        Some(s) if s.success() => Ok(p),
        other => Err(fail(&what, format!("the CLI ended {other:?}"))),
    }
}

/// What a turn through hangar showed.
struct HangarTurn {
    /// The events served, hangar's `run.state` aside.
    served: Vec<Seen>,
    /// The turn's log, as the supervisor wrote it.
    log: String,
    split: bool,
    /// When the session was requested and when the follower's stream opened (Unix seconds).
    started: f64,
    opened: f64,
}

/// The relay, its local sandbox's work directory, and the stand-in its turns call.
struct Hangar {
    world: RelayWorld,
    cwd: String,
    model: Model,
}

/// Runs `command` in the relay's default sandbox as its user; its stdout.
async fn exec(world: &RelayWorld, command: &str) -> Result<String> {
    let path = "/api/sandboxes/default/exec";
    let r = world.relay.call("POST", path, Some(ADMIN), Some(json!({"command": command}))).await;
    let v = r.json();
    if r.status != 200 || v["exit_code"] != 0 {
        return Err(fail(format!("POST {path}"), format!("{}: {v}", r.status)));
    }
    Ok(v["stdout"].as_str().unwrap_or_default().to_string())
}

impl Hangar {
    /// A relay as root (the uid split) whose local sandbox finds `claude` on its PATH, the step
    /// files in its work directory, and the secrets that point the CLI at a stand-in scripted
    /// for `turns` turns.
    async fn start(cli: &Path, steps: usize, turns: usize) -> Result<Hangar> {
        let dir = cli.parent().map(Path::to_path_buf).unwrap_or_default();
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
        let world = RelayWorld::start(&[("PATH", path.as_str())]);
        let files: String = (0..steps).map(|i| format!("echo 'step {i}' > step-{i}.txt && ")).collect();
        let cwd = exec(&world, &format!("mkdir -p bench-claude && cd bench-claude && {files}pwd")).await?;
        let cwd = cwd.trim().to_string();
        let model = Model::start((0..turns).flat_map(|_| script(&cwd, steps)).collect());
        let secrets = [
            ("ANTHROPIC_API_KEY", API_KEY.to_string()),
            ("ANTHROPIC_BASE_URL", model.url()),
            ("CLAUDE_CODE_MAX_RETRIES", MAX_RETRIES.to_string()),
        ];
        for (name, value) in secrets {
            let body = json!({"name": name, "value": value});
            let r = world.relay.call("POST", "/api/secrets", Some(ADMIN), Some(body)).await;
            if r.status != 201 {
                return Err(fail(format!("the secret {name}"), format!("{}: {:?}", r.status, r.json())));
            }
        }
        Ok(Hangar { world, cwd, model })
    }

    /// One session's turn, followed over SSE to its end.
    async fn turn(&self, name: &str) -> Result<HangarTurn> {
        let relay = &self.world.relay;
        let body = json!({"name": name, "sandbox": "default", "harness": "claude-code", "prompt": PROMPT,
            "cwd": self.cwd, "secrets": SECRETS});
        let started = now();
        let r = relay.call("POST", "/api/sessions", Some(ADMIN), Some(body)).await;
        let v = r.json();
        if r.status != 201 {
            return Err(fail(format!("starting session {name}"), format!("{}: {v}", r.status)));
        }
        let turn =
            v["turns"][0]["id"].as_str().ok_or_else(|| fail(format!("session {name}"), "no turn id"))?.to_string();
        let Followed { events, opened, .. } = follow_turn(relay, ADMIN, name, TURN_LIMIT).await?;
        let s = relay.call("GET", &format!("/api/sessions/{name}"), Some(ADMIN), None).await.json();
        let log = exec(&self.world, &format!("cat \"$HOME/.hangar/runs/{turn}.log\"")).await?;
        Ok(HangarTurn { served: events, log, split: s["split"] == true, started, opened })
    }
}

/// What every mode's runs add up to.
#[derive(Default)]
struct Samples {
    delays: Vec<f64>,
    delivered: Vec<f64>,
    turn_seconds: Vec<f64>,
    reads: Option<Reads>,
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let version = Command::new(&cfg.cli).arg("--version").output().ctx(format!("{} --version", cfg.cli.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).split_whitespace().next().unwrap_or_default().to_string();
    // The floor's home and work directory; its stand-ins, one a way out, scripted for every turn.
    let scratch = Scratch::new("bench-claude");
    let (home, work) = (scratch.join("home"), scratch.join("work"));
    for d in [&home, &work] {
        std::fs::create_dir_all(d).ctx(format!("creating {}", d.display()))?;
    }
    for i in 0..cfg.steps {
        let f = work.join(format!("step-{i}.txt"));
        std::fs::write(&f, format!("step {i}\n")).ctx(format!("writing {}", f.display()))?;
    }
    let turns = cfg.runs + 1;
    let work_s = work.to_string_lossy().into_owned();
    let floor_models: Vec<Model> =
        (0..2).map(|_| Model::start((0..turns).flat_map(|_| script(&work_s, cfg.steps)).collect())).collect();
    let hangar = Hangar::start(&cfg.cli, cfg.steps, turns).await?;
    let mut samples: Vec<Samples> = MODES.iter().map(|_| Samples::default()).collect();
    let mut lines_per_turn = Vec::new();
    let mut split = true;
    for run in 0..turns {
        let measured = run > 0;
        for (i, mode) in MODES.into_iter().enumerate() {
            let what = format!("claude, {} run {run}", mode.key());
            if mode == Mode::Hangar {
                let from = hangar.model.requests().len();
                let HangarTurn { served, log, split: held, started, opened } =
                    hangar.turn(&format!("claude-{run}")).await?;
                let answered = answered_since(&what, &hangar.model.requests(), from)?;
                // A line recorded before the follower connected would reach it late for that.
                if answered.first().is_some_and(|(_, sent)| *sent < opened) {
                    return Err(fail(&what, "the model answered before the SSE follower was connected"));
                }
                let lines: Vec<&str> = log.lines().collect();
                let mut parser = Parser::new(Format::ClaudeStreamJson);
                let expected: Vec<Vec<Value>> = lines
                    .iter()
                    .map(|l| {
                        parser
                            .feed(l.as_bytes())
                            .iter()
                            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
                            .collect()
                    })
                    .collect();
                let by_line = events_by_line(&what, &expected, &served)?;
                let first = first_lines(&lines);
                let ts: Vec<Option<f64>> = by_line.iter().map(|e| e.map(|(ts, _)| ts)).collect();
                let at: Vec<Option<f64>> = by_line.iter().map(|e| e.map(|(_, at)| at)).collect();
                let recorded = delays(&format!("{what}, recorded"), &first, &ts, &answered)?;
                let delivered = delays(&format!("{what}, at the follower"), &first, &at, &answered)?;
                if measured {
                    split &= held;
                    let s = &mut samples[i];
                    s.delays.extend(recorded);
                    s.delivered.extend(delivered);
                    let last = served.last().map_or(started, |e| e.ts);
                    s.turn_seconds.push(last - started);
                    lines_per_turn.push(lines.len());
                }
            } else {
                let model = &floor_models[i];
                let from = model.requests().len();
                let (cli, home, work, url) = (cfg.cli.clone(), home.clone(), work.clone(), model.url());
                let n = run * MODES.len() + i;
                let printed = tokio::task::spawn_blocking(move || floor_turn(mode, &cli, &home, &work, &url, n))
                    .await
                    .map_err(|e| fail(&what, e))??;
                let answered = answered_since(&what, &model.requests(), from)?;
                let at: Vec<Option<f64>> = printed.at.iter().copied().map(Some).collect();
                let d = delays(&what, &first_lines(&printed.lines), &at, &answered)?;
                if measured {
                    let s = &mut samples[i];
                    s.delays.extend(d);
                    s.turn_seconds.push(printed.at.last().copied().unwrap_or(printed.started) - printed.started);
                    add_reads(&mut s.reads, printed.reads());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "hangar-bench: claude: run {run} of {} done{}",
            cfg.runs,
            if measured { "" } else { " (unmeasured)" }
        );
    }
    let floor = Summary::of("claude, pipe", &samples[0].delays)?;
    let over = |s: &Summary| [round3(s.p50 - floor.p50), round3(s.p95 - floor.p95), round3(s.p99 - floor.p99)];
    let mut rows = Vec::new();
    let labels = [
        ("pipe", "read from a pipe (the floor)"),
        ("pty", "read from a pty"),
        ("hangar_recorded", "hangar: the event recorded (`ts`)"),
        ("hangar_follower", "hangar: at an SSE follower (`events/stream`)"),
    ];
    for (j, (key, label)) in labels.into_iter().enumerate() {
        let i = j.min(2);
        let s = &samples[i];
        let d = Summary::of(&format!("claude, {key}"), if j == 3 { &s.delivered } else { &s.delays })?;
        rows.push(Row {
            key,
            label,
            over_pipe_ms: over(&d),
            delay_ms: d,
            reads: s.reads.clone(),
            turn_seconds: Summary::of(&format!("claude, {key} turns"), &s.turn_seconds)?,
        });
    }
    lines_per_turn.sort_unstable();
    Ok(Report {
        cli: cfg.cli.display().to_string(),
        version,
        runs: cfg.runs,
        steps: cfg.steps,
        lines_per_turn: lines_per_turn.get(lines_per_turn.len() / 2).copied().unwrap_or(0),
        split,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        r#"{"type":"assistant","message":{"content":[{"text":"Step 1","type":"text"}],"id":"msg_stand_in_0002"}}"#;
    const TOOL: &str =
        r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Read"}],"id":"msg_stand_in_0002"}}"#;
    const RESULT: &str = r#"{"type":"user","message":{"content":[{"type":"tool_result"}],"id":"msg_stand_in_0002"}}"#;

    #[test]
    fn answers_are_named_by_assistant_lines() {
        assert_eq!(answer_of(TEXT), Some(2));
        assert_eq!(answer_of(RESULT), None);
        assert_eq!(answer_of("not json"), None);
        assert_eq!(answer_of(r#"{"type":"assistant","message":{"id":"msg_other"}}"#), None);
        assert!(is_result(r#"{"result":"done","type":"result"}"#) && !is_result(TEXT));
        let first = first_lines(&["{\"type\":\"system\"}", TEXT, TOOL, RESULT, &TOOL.replace("0002", "0003")]);
        assert_eq!(first, vec![(1, 2), (4, 3)]);
    }

    #[test]
    fn delays_need_every_answer_once_and_after_it() {
        let first = vec![(1, 2), (4, 3)];
        let at = vec![None, Some(10.005), None, None, Some(11.010)];
        let d = delays("t", &first, &at, &[(2, 10.0), (3, 11.0)]).expect("delays");
        let ms: Vec<i64> = d.iter().map(|x| x.round() as i64).collect();
        assert_eq!(ms, vec![5, 10]);
        // An answer without a line, a line naming another turn's answer, a line never seen, a
        // line seen before its answer: errors, never numbers.
        assert!(delays("t", &first, &at, &[(2, 10.0), (3, 11.0), (4, 12.0)]).is_err());
        assert!(delays("t", &first, &at, &[(2, 10.0), (5, 11.0)]).is_err());
        assert!(delays("t", &first, &[None, Some(10.005), None, None, None], &[(2, 10.0), (3, 11.0)]).is_err());
        assert!(delays("t", &first, &at, &[(2, 10.0), (3, 11.02)]).is_err());
    }

    fn seen(ts: f64, e: &Value) -> Seen {
        Seen { ts, at: ts + 0.5, kind: e["type"].as_str().unwrap_or_default().into(), data: e["data"].clone() }
    }

    #[test]
    fn events_map_to_lines_exactly() {
        let a = json!({"type": "message", "data": {"text": "a"}});
        let b = json!({"type": "phase", "data": {"phase": "x"}});
        let c = json!({"type": "usage", "data": {}});
        let expected = vec![vec![], vec![a.clone(), b.clone()], vec![c.clone()]];
        let got = events_by_line("t", &expected, &[seen(1.0, &a), seen(1.1, &b), seen(1.25, &c)]).expect("mapped");
        assert_eq!(got, vec![None, Some((1.0, 1.5)), Some((1.25, 1.75))]);
        assert!(events_by_line("t", &expected, &[seen(1.0, &a), seen(1.2, &c)]).is_err());
        assert!(events_by_line("t", &expected, &[seen(1.0, &b), seen(1.1, &a), seen(1.2, &c)]).is_err());
    }

    #[test]
    fn a_turn_reads_a_file_an_answer_and_ends_in_text() {
        let s = script("/w", 4);
        assert_eq!(s.len(), 4);
        assert!(matches!(&s[0], Step::Reply { text: None, tools } if tools[0].input["file_path"] == "/w/step-0.txt"));
        assert!(matches!(&s[1], Step::Reply { text: Some(_), tools } if tools[0].name == "Read"));
        assert!(matches!(&s[3], Step::Reply { text: Some(_), tools } if tools.is_empty()));
    }

    #[test]
    fn reads_count_bursts() {
        let p = Printed { lines: vec![String::new(); 4], at: vec![0.0; 4], read_no: vec![1, 2, 2, 3], started: 0.0 };
        let r = p.reads();
        assert_eq!((r.lines, r.reads, r.lines_sharing_a_read, r.max_lines_per_read), (4, 3, 2, 2));
        assert_ne!(session_id(1), session_id(2));
        assert_eq!(session_id(1).len(), 36);
    }
}
