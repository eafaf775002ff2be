//! Scenario 6, turn events (item 6 of "What is measured" in docs/performance.md): a harness that
//! replays a real Claude Code log (`agents/fixtures/claude-long-turn.jsonl`) a line every 100 ms,
//! run as an agent session on a Docker sandbox with the daemon and the uid split, and the delay
//! from each line's writing to its event's recording (the event's `ts`) and to its arrival at an
//! SSE client, for a relay that follows the turn's log (the default) and one that polls it every
//! `HANGAR_SESSION_POLL_SECONDS` (`HANGAR_STREAM_TURN_LOGS=false`), interleaved (run 1 of each,
//! then run 2, ...).
//!
//! The sandboxes are the daemon's test image as it is: the turn's files on the container's root
//! filesystem (fuse-overlayfs on an engine with that storage driver, which the relay follows
//! since the log's writer is in the same sandbox); the report names the filesystem, and a turn
//! the relay did not read the way its row says fails the run.
//!
//! The replay stamps each line as it writes it (`<line number> $EPOCHREALTIME` into a side file
//! in the sandbox, read afterwards through the relay's exec; the log lines themselves are the
//! fixture's, byte for byte). Events are mapped to lines by order: hangar-agents' parser, a pure
//! function, says which events each line of the fixture makes (some make none, some several),
//! and the events served must be exactly those, in that order, or the run fails.

use std::time::Duration;

use hangar_agents::{Format, Parser};
use hangar_e2e::{files::Scratch, relay::Relay};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    error::{fail, IoContext, Result},
    stats::{now, ratio, Lines, Summary},
    world::{image, RelayWorld, Sandbox},
};

/// The replayed log: a Claude Code turn (`claude -p --output-format stream-json --verbose`).
pub const FIXTURE: &str = include_str!("../../../agents/fixtures/claude-long-turn.jsonl");
const FIXTURE_NAME: &str = "agents/fixtures/claude-long-turn.jsonl";
/// Where the fixture is copied in the sandbox.
const FIXTURE_PATH: &str = "/tmp/hangar-bench-claude-long-turn.jsonl";
/// hangar's directory in a sandbox (the uid split's run files are below it).
const HANGAR_DIR: &str = "/var/lib/hangar";
/// How often the polling relay reads the log (the relay's default).
pub const POLL_SECONDS: f64 = 5.0;

/// The harness profile (`HANGAR_HARNESSES`). Its prompt, on stdin, is `WAIT HOLD MAX`: it waits
/// WAIT seconds, writes the fixture's first MAX lines a line every 100 ms, each stamped into the
/// side file just before it is written, then waits HOLD seconds and stamps its exit. No braces in
/// the script: they are the profile's placeholders.
const HARNESSES: &str = r#"[harness.replay]
new = ["bash", "-c", '''
read -r wait hold max
sleep "$wait"
n=0
while [ "$n" -lt "$max" ] && IFS= read -r line; do
  sleep 0.1
  n=$((n + 1))
  t=$EPOCHREALTIME
  printf '%s\n' "$line"
  printf '%s %s\n' "$n" "$t" >>"$2"
done <"$1"
sleep "$hold"
printf 'exit %s\n' "$EPOCHREALTIME" >>"$2"
''', "replay", "/tmp/hangar-bench-claude-long-turn.jsonl", "/tmp/{turn}.stamps"]
format = "claude-stream-json"
"#;

/// The targets a turn's events are set beside (line written to event recorded, p50 and p95, ms),
/// following the log and polling it every 5 s: docs/performance.md, scenario 6.
const DOCUMENT_FOLLOW_MS: [f64; 2] = [15.0, 22.0];
const DOCUMENT_POLL_MS: [f64; 2] = [4727.0, 4936.0];

pub struct Config {
    pub runs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Follow,
    Poll,
}

const MODES: [Mode; 2] = [Mode::Follow, Mode::Poll];

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Follow => "follow",
            Mode::Poll => "poll_5s",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Follow => "following the log (daemon `Follow`)",
            Mode::Poll => "polling every 5 s (`HANGAR_STREAM_TURN_LOGS=false`)",
        }
    }

    fn document_ms(self) -> [f64; 2] {
        match self {
            Mode::Follow => DOCUMENT_FOLLOW_MS,
            Mode::Poll => DOCUMENT_POLL_MS,
        }
    }

    fn env(self) -> Vec<(&'static str, String)> {
        match self {
            Mode::Follow => vec![],
            Mode::Poll => vec![
                ("HANGAR_STREAM_TURN_LOGS", "false".into()),
                ("HANGAR_SESSION_POLL_SECONDS", POLL_SECONDS.to_string()),
            ],
        }
    }

    /// The replay's prompt for run `run` of `runs`. Polled runs start their replay at a different
    /// point of the poll cycle each (run r waits r/runs of an interval), and wait an interval and
    /// a second after the last line, so that each line is read by a periodic poll and not by the
    /// read that follows the turn's end. Followed runs need neither.
    fn prompt(self, run: usize, runs: usize, max: usize) -> String {
        match self {
            Mode::Follow => format!("0 0 {max}\n"),
            Mode::Poll => {
                let wait = POLL_SECONDS * run as f64 / runs.max(1) as f64;
                format!("{wait:.3} {} {max}\n", POLL_SECONDS + 1.0)
            }
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub mode: &'static str,
    pub label: &'static str,
    /// From a line's writing to its (first) event's recording, the event's `ts`, in ms.
    pub recorded_ms: Summary,
    /// From a line's writing to its (first) event's arrival at the bench's SSE client, in ms.
    pub delivered_ms: Summary,
    /// From the harness's exit to the SSE stream's `close` (the turn's end seen), in ms, a
    /// sample per run.
    pub exit_to_close_ms: Summary,
    /// The target for this mode (line to recorded, p50 and p95, ms; docs/performance.md, scenario 6).
    pub document_ms: [f64; 2],
    /// This row's recorded p50 and p95 over the target's.
    pub recorded_vs_document: [Option<f64>; 2],
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub runs: usize,
    pub fixture: &'static str,
    /// The fixture's lines, and those of them that make at least one event (the measured ones).
    pub lines: usize,
    pub lines_with_events: usize,
    /// The events the fixture makes (hangar's own `run.state` events aside).
    pub events: usize,
    pub poll_seconds: f64,
    /// The sandbox's root filesystem, and that of its `/var/lib/hangar` (the root's unless it is
    /// a mount).
    pub sandbox_root_fs: String,
    pub runs_dir_fs: String,
    pub rows: Vec<Row>,
}

/// One relay, its sandbox, and the profile file it was started with.
struct Side {
    mode: Mode,
    world: RelayWorld,
    sandbox: Sandbox,
    token: String,
    _harnesses: Scratch,
}

/// The events each line of the fixture makes, as `{type, data}`, one list per line.
fn expected_events() -> Vec<Vec<Value>> {
    let mut parser = Parser::new(Format::ClaudeStreamJson);
    FIXTURE
        .lines()
        .map(|line| {
            parser.feed(line.as_bytes()).iter().map(|e| serde_json::to_value(e).unwrap_or(Value::Null)).collect()
        })
        .collect()
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let expected = expected_events();
    let lines = expected.len();
    let image = image("envd");
    let mut sides = Vec::new();
    for mode in MODES {
        sides.push(Side::start(mode, &image).await?);
    }
    let (sandbox_root_fs, runs_dir_fs) = sides[0].filesystems().await?;
    // One unmeasured turn each (two lines, both at once: a turn's end takes seconds to be
    // seen), so that neither pays for first connections.
    let names: Vec<String> = sides.iter().map(|s| format!("warm-{}", s.mode.key())).collect();
    futures::future::try_join_all(sides.iter().zip(&names).map(|(s, name)| s.turn(name, "0 0 2\n"))).await?;
    let mut recorded: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut delivered: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut ends: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for run in 0..cfg.runs {
        for (i, s) in sides.iter().enumerate() {
            let what = format!("{} run {}", s.mode.key(), run + 1);
            let seen = s.turn(&format!("{}-{}", s.mode.key(), run + 1), &s.mode.prompt(run, cfg.runs, lines)).await?;
            let d = delays(&what, &seen, &expected)?;
            recorded[i].extend(d.recorded_ms);
            delivered[i].extend(d.delivered_ms);
            ends[i].push((seen.closed - seen.exited) * 1000.0);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut rows = Vec::new();
    for (i, m) in MODES.iter().enumerate() {
        let rec = Summary::of(m.key(), &recorded[i])?;
        let doc = m.document_ms();
        rows.push(Row {
            mode: m.key(),
            label: m.label(),
            recorded_vs_document: [ratio(rec.p50, doc[0]), ratio(rec.p95, doc[1])],
            recorded_ms: rec,
            delivered_ms: Summary::of(m.key(), &delivered[i])?,
            exit_to_close_ms: Summary::of(m.key(), &ends[i])?,
            document_ms: doc,
        });
    }
    Ok(Report {
        runs: cfg.runs,
        fixture: FIXTURE_NAME,
        lines,
        lines_with_events: expected.iter().filter(|e| !e.is_empty()).count(),
        events: expected.iter().map(Vec::len).sum(),
        poll_seconds: POLL_SECONDS,
        sandbox_root_fs,
        runs_dir_fs,
        rows,
    })
}

/// An event of a turn as the SSE follower saw it: its `ts` (recorded), when it arrived, its
/// type and data.
#[derive(Debug, Clone)]
pub struct Seen {
    pub ts: f64,
    pub at: f64,
    pub kind: String,
    pub data: Value,
}

/// A session's first turn, followed over SSE from its start to the stream's end.
pub struct Followed {
    /// The agent's events as served (hangar's `run.state` left out), in order.
    pub events: Vec<Seen>,
    /// When the stream opened and when its `close` came (Unix seconds).
    pub opened: f64,
    pub closed: f64,
}

/// Follows session `name`'s events (`since=0`) with `token` until the stream ends, waiting at
/// most `limit` for each. Fails unless the seqs rise, each SSE id is its seq, the stream ends
/// `done` and the turn `succeeded`.
pub async fn follow_turn(relay: &Relay, token: &str, name: &str, limit: Duration) -> Result<Followed> {
    let path = format!("/api/sessions/{name}/events/stream?since=0");
    let mut sse = relay.sse("GET", &path, Some(token), None).await;
    if sse.status != 200 {
        return Err(fail(format!("GET {path}"), sse.status));
    }
    let opened = now();
    let mut events = Vec::new();
    let mut last_seq = 0;
    let mut state = Value::Null;
    let closed = loop {
        let Some(ev) = sse.next(limit).await else { break None };
        let at = now();
        if ev.event == "close" {
            break Some((ev.json(), at));
        }
        let e = ev.json();
        let seq = e["seq"].as_i64().unwrap_or(0);
        if seq <= last_seq || ev.id.as_deref() != Some(&seq.to_string()) {
            return Err(fail(format!("GET {path}"), format!("event seq {seq} (id {:?}) after {last_seq}", ev.id)));
        }
        last_seq = seq;
        let (kind, data) = (e["type"].as_str().unwrap_or_default().to_string(), e["data"].clone());
        if kind == "run.state" && data["source"] == "hangar" {
            state = data;
            continue;
        }
        let ts = e["ts"].as_f64().ok_or_else(|| fail(format!("GET {path}"), format!("an event without ts: {e}")))?;
        events.push(Seen { ts, at, kind, data });
    };
    let closed = match closed {
        Some((c, at)) if c["reason"] == "done" => at,
        other => return Err(fail(format!("GET {path}"), format!("the stream ended with {other:?}"))),
    };
    if state["to"] != "succeeded" {
        return Err(fail(format!("session {name}"), format!("the turn ended {state}")));
    }
    Ok(Followed { events, opened, closed })
}

/// What one turn showed: its agent events in order, and the stamped lines the replay wrote.
struct Turn {
    events: Vec<Seen>,
    stamps: Lines,
    /// When the SSE stream had opened, the harness exited, and the stream closed (Unix seconds).
    opened: f64,
    exited: f64,
    closed: f64,
}

impl Side {
    async fn start(mode: Mode, image: &str) -> Result<Side> {
        let harnesses = Scratch::new(&format!("bench-turns-{}", mode.key()));
        let file = harnesses.join("harnesses.toml");
        std::fs::write(&file, HARNESSES).ctx(format!("writing {}", file.display()))?;
        let file = file.to_string_lossy().into_owned();
        let env = mode.env();
        let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.push(("HANGAR_HARNESSES", &file));
        let mut world = RelayWorld::start(&env);
        // With `user`, the daemon is root and the harness runs as `user`: the uid split.
        let options = json!({"image": image, "user": "user"});
        let sandbox = world.docker_sandbox_with(&format!("turns-{}", mode.key()), options, true).await?;
        let token = world.relay.token(&format!("bench-{}", mode.key()), "user").await.secret;
        let side = Side { mode, world, sandbox, token, _harnesses: harnesses };
        side.put_fixture().await?;
        Ok(side)
    }

    /// Runs `command` in the sandbox through the relay's exec (as its user); its stdout.
    async fn exec(&self, command: &str) -> Result<String> {
        let path = format!("/api/sandboxes/{}/exec", self.sandbox.name);
        let r = self.world.relay.call("POST", &path, Some(&self.token), Some(json!({"command": command}))).await;
        let v = r.json();
        if r.status != 200 || v["exit_code"] != 0 {
            return Err(fail(format!("POST {path}"), format!("{}: {v}", r.status)));
        }
        Ok(v["stdout"].as_str().unwrap_or_default().to_string())
    }

    /// The filesystem types of the sandbox's `/` and of its hangar directory, from its own
    /// /proc/mounts (the image has no awk).
    async fn filesystems(&self) -> Result<(String, String)> {
        let script = format!(
            r#"r=; v=; while read -r _ m t _; do [ "$m" = / ] && r=$t; [ "$m" = {HANGAR_DIR} ] && v=$t; done < /proc/mounts; echo "$r $v""#
        );
        let out = self.exec(&script).await?;
        match out.split_whitespace().collect::<Vec<_>>()[..] {
            [root, runs] => Ok((root.to_string(), runs.to_string())),
            [root] => Ok((root.to_string(), root.to_string())),
            _ => Err(fail("the sandbox's filesystems", format!("no root in /proc/mounts: {out:?}"))),
        }
    }

    async fn put_fixture(&self) -> Result<()> {
        let quoted = format!("'{}'", FIXTURE.replace('\'', r"'\''"));
        let size = self.exec(&format!("printf %s {quoted} > {FIXTURE_PATH} && wc -c < {FIXTURE_PATH}")).await?;
        if size.trim() != FIXTURE.len().to_string() {
            return Err(fail(
                "copying the fixture into the sandbox",
                format!("{} bytes, want {}", size.trim(), FIXTURE.len()),
            ));
        }
        Ok(())
    }

    /// Starts a session whose turn replays the fixture with `prompt`, follows its events over SSE
    /// until the turn ends, checks how the turn went, and reads the replay's stamps.
    async fn turn(&self, name: &str, prompt: &str) -> Result<Turn> {
        let relay = &self.world.relay;
        let body = json!({"name": name, "sandbox": self.sandbox.name, "harness": "replay", "prompt": prompt, "cwd": "/home/user"});
        let r = relay.call("POST", "/api/sessions", Some(&self.token), Some(body)).await;
        let v = r.json();
        if r.status != 201 {
            return Err(fail(format!("starting session {name}"), format!("{}: {v}", r.status)));
        }
        let turn =
            v["turns"][0]["id"].as_str().ok_or_else(|| fail(format!("session {name}"), "no turn id"))?.to_string();
        let Followed { events, opened, closed } =
            follow_turn(relay, &self.token, name, Duration::from_secs(60)).await?;
        let s = relay.call("GET", &format!("/api/sessions/{name}"), Some(&self.token), None).await.json();
        if s["split"] != true {
            return Err(fail(format!("session {name}"), format!("the uid split does not hold (split {})", s["split"])));
        }
        let polled = s["turns"][0]["polled"] == true;
        if polled != (self.mode == Mode::Poll) {
            return Err(fail(
                format!("session {name}"),
                format!("the turn's log was {}", if polled { "polled" } else { "followed" }),
            ));
        }
        let text = self.exec(&format!("cat /tmp/{turn}.stamps")).await?;
        let mut stamps = Lines::default();
        stamps.feed(&text, now());
        let exited = text.lines().find_map(|l| l.strip_prefix("exit ")?.trim().parse::<f64>().ok());
        let exited = exited.ok_or_else(|| fail(format!("session {name}"), "the replay stamped no exit"))?;
        if exited > closed {
            return Err(fail(format!("session {name}"), "the stream closed before the harness exited"));
        }
        Ok(Turn { events, stamps, opened, exited, closed })
    }
}

/// Each measured line's delays, in ms.
struct Delays {
    recorded_ms: Vec<f64>,
    delivered_ms: Vec<f64>,
}

/// Maps the turn's events to the fixture's lines and times each line that made events. Fails
/// unless the events are exactly those the fixture makes, in order.
fn delays(what: &str, turn: &Turn, expected: &[Vec<Value>]) -> Result<Delays> {
    turn.stamps.check_complete(&format!("{what}: the replay's stamps"), expected.len() as u64)?;
    let want: usize = expected.iter().map(Vec::len).sum();
    if turn.events.len() != want {
        return Err(fail(what, format!("{} events, want {want} (one missing or repeated)", turn.events.len())));
    }
    if turn.stamps.stamps.first().is_some_and(|s| *s < turn.opened) {
        return Err(fail(what, "the first line was written before the SSE client was connected"));
    }
    let mut d = Delays { recorded_ms: Vec::new(), delivered_ms: Vec::new() };
    let mut next = 0;
    for (line, events) in expected.iter().enumerate() {
        for (part, e) in events.iter().enumerate() {
            let got = &turn.events[next + part];
            if got.kind != e["type"] || got.data != e["data"] {
                return Err(fail(
                    what,
                    format!("event {} (line {}): got {} {}, want {e}", next + part + 1, line + 1, got.kind, got.data),
                ));
            }
        }
        if let Some(first) = turn.events.get(next).filter(|_| !events.is_empty()) {
            let written = turn.stamps.stamps[line];
            if first.ts < written || first.at < first.ts {
                return Err(fail(
                    what,
                    format!(
                        "line {}: written at {written}, recorded at {}, received at {}",
                        line + 1,
                        first.ts,
                        first.at
                    ),
                ));
            }
            d.recorded_ms.push((first.ts - written) * 1000.0);
            d.delivered_ms.push((first.at - written) * 1000.0);
        }
        next += events.len();
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use hangar_agents::harness::{Harnesses, Vars};

    use super::*;

    #[test]
    fn the_fixture_makes_events_on_most_lines() {
        let e = expected_events();
        assert_eq!(e.len(), FIXTURE.lines().count());
        assert!(e.iter().filter(|l| !l.is_empty()).count() >= e.len() - 2);
    }

    #[test]
    fn the_profile_has_no_stray_placeholders() {
        assert_eq!(HARNESSES.matches('{').count(), 1);
        assert!(HARNESSES.contains(FIXTURE_PATH));
        let all = Harnesses::with_file(HARNESSES).expect("the profile loads");
        let vars = Vars { session_id: None, cwd: "/home/user", prompt_file: "/p", turn: "turn_1" };
        let argv = all.get("replay").expect("replay").argv(false, &vars).expect("argv");
        assert_eq!(argv[..2], ["bash", "-c"]);
        assert_eq!(argv[3..], ["replay", FIXTURE_PATH, "/tmp/turn_1.stamps"]);
    }

    fn turn(events: &[(f64, &Value)], stamps: &str) -> Turn {
        let mut l = Lines::default();
        l.feed(stamps, 0.0);
        let events = events
            .iter()
            .map(|(t, e)| Seen {
                ts: *t,
                at: t + 0.001,
                kind: e["type"].as_str().unwrap().into(),
                data: e["data"].clone(),
            })
            .collect();
        Turn { events, stamps: l, opened: 0.5, exited: 2.0, closed: 2.5 }
    }

    #[test]
    fn events_map_to_lines_exactly() {
        let a = json!({"type": "message", "data": {"text": "a"}});
        let b = json!({"type": "phase", "data": {"phase": "x"}});
        let c = json!({"type": "usage", "data": {}});
        let expected = vec![vec![], vec![a.clone(), b.clone()], vec![c.clone()]];
        let stamps = "1 1.0\n2 1.1\n3 1.2\n";
        let d = delays("t", &turn(&[(1.102, &a), (1.102, &b), (1.205, &c)], stamps), &expected).expect("mapped");
        let r: Vec<i64> = d.recorded_ms.iter().map(|x| x.round() as i64).collect();
        assert_eq!(r, vec![2, 5]);
        // Missing, repeated or out of order: an error, never a number.
        assert!(delays("t", &turn(&[(1.102, &a), (1.205, &c)], stamps), &expected).is_err());
        assert!(delays("t", &turn(&[(1.102, &a), (1.102, &a), (1.205, &c)], stamps), &expected).is_err());
        assert!(delays("t", &turn(&[(1.102, &b), (1.102, &a), (1.205, &c)], stamps), &expected).is_err());
        // Recorded before it was written: mapped wrong.
        assert!(delays("t", &turn(&[(1.09, &a), (1.102, &b), (1.205, &c)], stamps), &expected).is_err());
        // A stamp missing.
        assert!(delays("t", &turn(&[(1.102, &a), (1.102, &b), (1.205, &c)], "1 1.0\n3 1.2\n"), &expected).is_err());
    }
}
