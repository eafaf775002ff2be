//! Scenario 7, the fleet read (item 7 of "What is measured" in docs/performance.md): one relay
//! with `sandboxes` local sandboxes (each with its own daemon), a tenth of them a person's; on a
//! fifth of them an agent session replaying `agents/fixtures/claude-long-turn.jsonl` (half still
//! running, half ended), so units carry live pictures, stages and tokens. Measured from outside:
//! `GET /api/fleet` as an admin with every unit (`?include_stopped=true`), as an admin by default,
//! and as the person, each `requests` times in turn on a fresh connection (after a warm-up), with
//! the body's size; and the stream's snapshot (`GET /api/fleet/stream`, from the request to the
//! first event), with its size. The stream's fan-out: `WATCHERS` streams open at once, then one
//! change at a time (a sandbox created), timed from the creating request's answer to each
//! stream's `agent` event for it. The relay's resident memory with it all.
//!
//! There is no peer: the figure is the product's own target (200 sandboxes read in a few
//! milliseconds). A read that does not show the units set up fails the run.

use std::time::{Duration, Instant};

use hangar_e2e::{files::Scratch, procfs, relay::ADMIN};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    error::{fail, IoContext, Result},
    stats::Summary,
    world::RelayWorld,
};

const FIXTURE: &str = include_str!("../../../agents/fixtures/claude-long-turn.jsonl");

/// Two profiles replaying the fixture as fast as it goes: one then stays running, one ends.
fn harnesses(fixture: &str) -> String {
    let replay = r#"cat >/dev/null; while IFS= read -r l; do printf '%s\n' "$l"; done < "$1"; exec sleep "$2""#;
    format!(
        "[harness.running]\nnew = [\"bash\", \"-c\", '''{replay}''', \"replay\", \"{fixture}\", \"600\"]\nformat = \"claude-stream-json\"\n\n\
         [harness.ended]\nnew = [\"bash\", \"-c\", '''{replay}''', \"replay\", \"{fixture}\", \"0\"]\nformat = \"claude-stream-json\"\n"
    )
}

pub struct Config {
    pub sandboxes: usize,
    pub requests: usize,
    /// Changes made while `WATCHERS` streams watch.
    pub changes: usize,
}

/// Streams open at once for the fan-out; above `HANGAR_STREAM_MAX_PER_TOKEN`'s default (16), so
/// this relay allows more per token.
pub const WATCHERS: usize = 100;

#[derive(Debug, Serialize)]
pub struct Row {
    pub read: &'static str,
    pub query: &'static str,
    pub units: usize,
    /// The body's size, in bytes.
    pub bytes: usize,
    pub latency_ms: Summary,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// Sandboxes created (the relay's `default` is one more).
    pub sandboxes: usize,
    pub person_sandboxes: usize,
    pub sessions_running: usize,
    pub sessions_ended: usize,
    pub requests: usize,
    pub rows: Vec<Row>,
    /// From the stream's request to its `snapshot` event, in ms (`requests / 10` opens).
    pub stream_snapshot_ms: Summary,
    pub stream_snapshot_bytes: usize,
    pub watchers: usize,
    pub changes: usize,
    /// Creating the sandbox (the change), from the request to its answer, in ms.
    pub change_request_ms: Summary,
    /// From the creating request's answer to each stream's `agent` event for the new unit, in ms
    /// (negative: the event came first), over every stream and change.
    pub fanout_ms: Summary,
    /// Per change, from the first stream's event to the last one's, in ms.
    pub fanout_spread_ms: Summary,
    pub relay_rss_kib: u64,
}

async fn post(world: &RelayWorld, token: &str, path: &str, body: Value) -> Result<Value> {
    let r = world.relay.call("POST", path, Some(token), Some(body)).await;
    let v = r.json();
    if r.status != 201 {
        return Err(fail(format!("POST {path}"), format!("{}: {v}", r.status)));
    }
    Ok(v)
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let scratch = Scratch::new("bench-fleet");
    let fixture = scratch.join("claude-long-turn.jsonl");
    std::fs::write(&fixture, FIXTURE).ctx(format!("writing {}", fixture.display()))?;
    let file = scratch.join("harnesses.toml");
    std::fs::write(&file, harnesses(&fixture.to_string_lossy())).ctx(format!("writing {}", file.display()))?;
    let file = file.to_string_lossy().into_owned();
    let per_token = (WATCHERS + 16).to_string();
    // Each local sandbox reserves its disk when it is made: 200 of the default 2 GiB would ask for
    // 400 GiB. These sandboxes hold nothing, so each gets the smallest (docs/operations.md).
    let world = RelayWorld::start(&[
        ("HANGAR_HARNESSES", &file),
        ("HANGAR_STREAM_MAX_PER_TOKEN", &per_token),
        ("HANGAR_LOCAL_DISK_MIB", "64"),
    ]);
    let person = post(
        &world,
        ADMIN,
        "/api/tokens",
        json!({"name": "bench-person", "scope": "user", "person": {"id": "pat", "name": "Pat"}}),
    )
    .await?;
    let person = person["secret"].as_str().ok_or_else(|| fail("a person's token", "no secret"))?.to_string();

    let person_sandboxes = cfg.sandboxes / 10;
    let with_session = cfg.sandboxes / 5;
    let (mut running, mut ended) = (0, 0);
    let started = Instant::now();
    for i in 0..cfg.sandboxes {
        let token = if i < person_sandboxes { person.as_str() } else { ADMIN };
        let name = format!("fleet-{i:03}");
        post(&world, token, "/api/sandboxes", json!({ "name": name })).await?;
        if i % 5 == 0 && (i / 5) < with_session {
            let harness = if (i / 5) % 2 == 0 { "running" } else { "ended" };
            let body = json!({"name": format!("s-{i:03}"), "sandbox": name, "harness": harness, "prompt": "Fix the failing tests"});
            post(&world, token, "/api/sessions", body).await?;
            if harness == "running" {
                running += 1;
            } else {
                ended += 1;
            }
        }
    }
    eprintln!("hangar-bench: fleet: {} sandboxes in {:.1} s", cfg.sandboxes, started.elapsed().as_secs_f64());

    // Every replay has told everything: the running ones are running with their tokens counted,
    // the others ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let f = world.relay.call("GET", "/api/fleet?include_stopped=true", Some(ADMIN), None).await.json();
        let units = f["units"].as_array().cloned().unwrap_or_default();
        let told = units
            .iter()
            .filter(|u| {
                u["role"] == "running"
                    && u["tokens_1h"].as_array().is_some_and(|b| b.iter().any(|n| n.as_u64() > Some(0)))
            })
            .count();
        let done = units.iter().filter(|u| u["session"]["state"] == "succeeded").count();
        if units.len() == cfg.sandboxes + 1 && told == running && done == ended {
            break;
        }
        if Instant::now() > deadline {
            return Err(fail(
                "the fleet's sessions",
                format!("{} units, {told} of {running} running with tokens, {done} of {ended} ended", units.len()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let reads: [(&'static str, &'static str, &str, usize); 3] = [
        ("admin, every unit", "?include_stopped=true", ADMIN, cfg.sandboxes + 1),
        ("admin, settled units left out", "", ADMIN, cfg.sandboxes + 1 - ended),
        ("a person's own, every unit", "?include_stopped=true", person.as_str(), person_sandboxes),
    ];
    let mut rows = Vec::new();
    for (read, query, token, want) in reads {
        let path = format!("/api/fleet{query}");
        for _ in 0..10 {
            world.relay.call("GET", &path, Some(token), None).await;
        }
        let mut samples = Vec::new();
        let mut bytes = 0;
        for _ in 0..cfg.requests {
            let t = Instant::now();
            let r = world.relay.call("GET", &path, Some(token), None).await;
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
            let units = r.json()["units"].as_array().map_or(0, Vec::len);
            if r.status != 200 || units != want {
                return Err(fail(format!("GET {path} ({read})"), format!("{}: {units} units, want {want}", r.status)));
            }
            bytes = r.body.len();
        }
        rows.push(Row { read, query, units: want, bytes, latency_ms: Summary::of(read, &samples)? });
    }

    let mut samples = Vec::new();
    let mut stream_bytes = 0;
    for _ in 0..(cfg.requests / 10).max(1) {
        let t = Instant::now();
        let mut sse = world.relay.sse("GET", "/api/fleet/stream?include_stopped=true", Some(ADMIN), None).await;
        let first = sse.next(Duration::from_secs(10)).await;
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
        match first {
            Some(e) if e.event == "snapshot" => stream_bytes = e.data.len(),
            other => return Err(fail("GET /api/fleet/stream", format!("the first event was {other:?}"))),
        }
    }
    let fanout = fan_out(&world, cfg.changes).await?;
    let relay_rss_kib = procfs::rss_kib(world.relay.pid()).ctx("the relay's resident memory")?;
    Ok(Report {
        sandboxes: cfg.sandboxes,
        person_sandboxes,
        sessions_running: running,
        sessions_ended: ended,
        requests: cfg.requests,
        rows,
        stream_snapshot_ms: Summary::of("the stream's snapshot", &samples)?,
        stream_snapshot_bytes: stream_bytes,
        watchers: WATCHERS,
        changes: cfg.changes,
        change_request_ms: fanout.request,
        fanout_ms: fanout.arrival,
        fanout_spread_ms: fanout.spread,
        relay_rss_kib,
    })
}

struct FanOut {
    request: Summary,
    arrival: Summary,
    spread: Summary,
}

/// `WATCHERS` fleet streams, then `changes` sandboxes created one at a time, each awaited on every
/// stream as its `agent` event.
async fn fan_out(world: &RelayWorld, changes: usize) -> Result<FanOut> {
    const PATH: &str = "/api/fleet/stream?include_stopped=true";
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        let mut sse = world.relay.sse("GET", PATH, Some(ADMIN), None).await;
        match sse.next(Duration::from_secs(10)).await {
            Some(e) if e.event == "snapshot" => streams.push(sse),
            other => return Err(fail("GET /api/fleet/stream", format!("the first event was {other:?}"))),
        }
    }
    let (mut request, mut arrival, mut spread) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..changes {
        let name = format!("fanout-{k:02}");
        let waiting: Vec<_> = streams
            .drain(..)
            .map(|mut sse| {
                let name = name.clone();
                tokio::spawn(async move {
                    loop {
                        match sse.next(Duration::from_secs(30)).await {
                            Some(e) if e.event == "agent" && e.json()["name"] == name.as_str() => {
                                return Ok((sse, crate::stats::now()));
                            }
                            Some(_) => {}
                            None => return Err(fail("the fleet stream", format!("no event for {name}"))),
                        }
                    }
                })
            })
            .collect();
        let t0 = crate::stats::now();
        post(world, ADMIN, "/api/sandboxes", json!({ "name": name })).await?;
        let t1 = crate::stats::now();
        request.push((t1 - t0) * 1000.0);
        let mut got = Vec::new();
        for w in waiting {
            let (sse, at) = w.await.map_err(|e| fail("the fleet stream", e))??;
            streams.push(sse);
            got.push(at);
        }
        let first = got.iter().copied().fold(f64::INFINITY, f64::min);
        let last = got.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        arrival.extend(got.iter().map(|at| (at - t1) * 1000.0));
        spread.push((last - first) * 1000.0);
    }
    Ok(FanOut {
        request: Summary::of("creating a sandbox", &request)?,
        arrival: Summary::of("the fan-out", &arrival)?,
        spread: Summary::of("the fan-out's spread", &spread)?,
    })
}

#[cfg(test)]
mod tests {
    use hangar_agents::harness::{Harnesses, Vars};

    use super::*;

    #[test]
    fn the_profiles_load_and_replay_then_hold_or_end() {
        let all = Harnesses::with_file(&harnesses("/tmp/f.jsonl")).expect("the profiles load");
        let vars = Vars { session_id: None, cwd: "/w", prompt_file: "/p", turn: "turn_1" };
        let argv = all.get("running").expect("running").argv(false, &vars).expect("argv");
        assert_eq!(argv[3..], ["replay", "/tmp/f.jsonl", "600"]);
        let argv = all.get("ended").expect("ended").argv(false, &vars).expect("argv");
        assert_eq!(argv[5], "0");
    }
}
