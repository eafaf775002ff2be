//! `hangar-bench-agent-writer`: the agents scenario's harness, one process per agent. It writes
//! Claude Code stream-json lines (`claude -p --output-format stream-json --verbose`: a `system`
//! init, then `assistant` text, `assistant` `tool_use` and `user` `tool_result` lines in turn,
//! then a `result`) to stdout at a configured pace, and exits 0. It forks nothing and waits with
//! `nanosleep`, so that a thousand of them cost the machine almost nothing: the load is the
//! relay's, not the load generator's.
//!
//! Its prompt, on stdin (one line of `key=value` words), says how:
//! - `min_ms`, `max_ms`: the wait before each line, uniform between them (equal: a fixed rate);
//!   each line is due at the previous one's due time plus the wait, so writing takes no time off
//!   the rate;
//! - `seconds`: how long it writes before its `result` line;
//! - `big_every`: every that many lines, a tool result of 64 KiB (0: none);
//! - `huge_at`: that line is a tool result of 1 MiB (the most a log line keeps; 0: none);
//! - `seed`: for the waits' jitter.
//!
//! Every line carries `hb:<n>:<unix seconds>` (its number from 1 and the wall-clock time just
//! before it was written, the clock the relay stamps events with) in a field the line's first
//! event keeps (the init's version, a message's text, a tool's pattern, a tool result's first
//! characters, the result's text), so the bench reads each line's writing time back from the
//! recorded events and nothing else is written anywhere. The `result` line's text also says
//! `lines=<n> cpu_us=<user+system CPU of this process>`: the load generator's own cost.

use std::{
    io::{self, BufRead, Write},
    process::ExitCode,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

/// A tool result "now and then".
const BIG: usize = 64 << 10;
/// The one huge line: 1 MiB with its newline, the most a turn's log keeps whole.
const HUGE: usize = (1 << 20) - 1;

#[derive(Debug, Clone, PartialEq)]
struct Plan {
    min_ms: u64,
    max_ms: u64,
    seconds: f64,
    big_every: u64,
    huge_at: u64,
    seed: u64,
}

impl Plan {
    fn parse(prompt: &str) -> Result<Plan, String> {
        let mut p = Plan { min_ms: 200, max_ms: 1000, seconds: 10.0, big_every: 0, huge_at: 0, seed: 1 };
        for word in prompt.split_whitespace() {
            let (k, v) = word.split_once('=').ok_or_else(|| format!("{word:?} is not key=value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{k}={v}: {e}");
            match k {
                "min_ms" => p.min_ms = v.parse().map_err(|e| bad(&e))?,
                "max_ms" => p.max_ms = v.parse().map_err(|e| bad(&e))?,
                "seconds" => p.seconds = v.parse().map_err(|e| bad(&e))?,
                "big_every" => p.big_every = v.parse().map_err(|e| bad(&e))?,
                "huge_at" => p.huge_at = v.parse().map_err(|e| bad(&e))?,
                "seed" => p.seed = v.parse().map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        if p.max_ms < p.min_ms {
            return Err("max_ms is below min_ms".into());
        }
        Ok(p)
    }
}

/// xorshift64*: jitter without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn stamp(n: u64) -> String {
    format!("hb:{n}:{:.6}", now())
}

const SESSION: &str = "7d2e54a0-3c1f-4b8e-9f61-2a5c0d9e8b17";

/// Line `n` of the turn (2 and on: 1 is the init), with its stamp; `size` pads a tool result.
fn line(n: u64, stamp: &str, size: Option<usize>) -> String {
    // Lines 2, 5, 8...: text; 3, 6, 9...: a tool call; 4, 7, 10...: its result.
    let id = format!("toolu_{:06}", n - (n + 1) % 3);
    let usage = r#""usage":{"input_tokens":3,"cache_creation_input_tokens":400,"cache_read_input_tokens":12000,"output_tokens":40,"service_tier":"standard"}"#;
    let mut l = match ((n + 1) % 3, size) {
        (0, None) => format!(
            r#"{{"type":"assistant","message":{{"model":"claude-sonnet-5","id":"msg_{n}","type":"message","role":"assistant","content":[{{"type":"text","text":"{stamp} Looking at the loader and its tests next."}}],"stop_reason":null,"stop_sequence":null,{usage}}},"parent_tool_use_id":null,"session_id":"{SESSION}"}}"#
        ),
        (1, None) => format!(
            r#"{{"type":"assistant","message":{{"model":"claude-sonnet-5","id":"msg_{n}","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"Grep","input":{{"pattern":"{stamp}","path":"src"}}}}],"stop_reason":null,"stop_sequence":null,{usage}}},"parent_tool_use_id":null,"session_id":"{SESSION}"}}"#
        ),
        _ => format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":"{stamp} src/shipper/cli.py:8:from shipper.config import load_config\nsrc/shipper/config.py:11:def load_config(path):"}}]}},"parent_tool_use_id":null,"session_id":"{SESSION}"}}"#
        ),
    };
    if let Some(size) = size {
        // A tool result padded to `size` bytes (without the newline) inside its content string.
        let id = format!("toolu_{n:06}");
        let start = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":"{stamp} "#
        );
        let end = format!(r#""}}]}},"parent_tool_use_id":null,"session_id":"{SESSION}"}}"#);
        let fill = size.saturating_sub(start.len() + end.len());
        let mut body = String::with_capacity(fill);
        let row = "    42\\tdef load_config(path): return Config(retries=raw.get(\\\"retries\\\", 3))\\n";
        while body.len() + row.len() <= fill {
            body.push_str(row);
        }
        while body.len() < fill {
            body.push('x');
        }
        l = format!("{start}{body}{end}");
    }
    l.push('\n');
    l
}

fn cpu_us() -> u64 {
    // SAFETY: getrusage(2) fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

fn run(plan: &Plan) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let mut rng = Rng(plan.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let started = Instant::now();
    let mut due = started;
    let s = stamp(1);
    let init = format!(
        r#"{{"type":"system","subtype":"init","cwd":"/work","session_id":"{SESSION}","tools":["Bash","Edit","Grep","Read"],"mcp_servers":[],"model":"claude-sonnet-5","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"{s}","output_style":"default"}}"#
    );
    out.write_all(format!("{init}\n").as_bytes())?;
    out.flush()?;
    let mut n = 1;
    loop {
        let wait =
            plan.min_ms + if plan.max_ms > plan.min_ms { rng.next() % (plan.max_ms - plan.min_ms + 1) } else { 0 };
        due += Duration::from_millis(wait);
        if due.duration_since(started).as_secs_f64() >= plan.seconds {
            break;
        }
        n += 1;
        let size = if n == plan.huge_at {
            Some(HUGE - 1)
        } else if plan.big_every > 0 && n % plan.big_every == 0 {
            Some(BIG)
        } else {
            None
        };
        if size.is_some() {
            // The tool call the result answers, written just before it (not stamped: not measured).
            let id = format!("toolu_{n:06}");
            let call = format!(
                r#"{{"type":"assistant","message":{{"model":"claude-sonnet-5","id":"msg_{n}","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"Read","input":{{"file_path":"src/generated/big.txt"}}}}]}},"session_id":"{SESSION}"}}"#
            );
            out.write_all(format!("{call}\n").as_bytes())?;
            out.flush()?;
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let text = line(n, &stamp(n), size);
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    n += 1;
    let s = stamp(n);
    let result = format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"duration_ms":{},"num_turns":{n},"result":"{s} lines={n} cpu_us={}","session_id":"{SESSION}","total_cost_usd":0.01,"usage":{{"input_tokens":3,"cache_creation_input_tokens":400,"cache_read_input_tokens":12000,"output_tokens":40}}}}"#,
        started.elapsed().as_millis(),
        cpu_us()
    );
    out.write_all(format!("{result}\n").as_bytes())?;
    out.flush()
}

fn main() -> ExitCode {
    let mut prompt = String::new();
    if let Err(e) = io::stdin().lock().read_line(&mut prompt) {
        eprintln!("hangar-bench-agent-writer: reading the prompt: {e}");
        return ExitCode::from(2);
    }
    let plan = match Plan::parse(&prompt) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hangar-bench-agent-writer: the prompt: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-bench-agent-writer: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse() {
        let p = Plan::parse("min_ms=200 max_ms=200 seconds=3.5 big_every=40 huge_at=90 seed=7\n").expect("plan");
        assert_eq!((p.min_ms, p.max_ms, p.seconds, p.big_every, p.huge_at, p.seed), (200, 200, 3.5, 40, 90, 7));
        assert!(Plan::parse("min_ms=5 max_ms=1").is_err());
        assert!(Plan::parse("nope=1").is_err());
    }

    #[test]
    fn lines_are_json_of_their_size_with_their_stamp() {
        for n in 2..8 {
            let l = line(n, "hb:5:1.5", None);
            let v: serde_json::Value = serde_json::from_str(l.trim_end()).expect("json");
            assert!(v["type"].is_string());
            assert!(l.contains("hb:5:1.5"));
        }
        for size in [BIG, HUGE - 1] {
            let l = line(9, "hb:9:1.5", Some(size));
            assert_eq!(l.len(), size + 1);
            let v: serde_json::Value = serde_json::from_str(l.trim_end()).expect("json");
            assert!(v["message"]["content"][0]["content"].as_str().expect("content").starts_with("hb:9:1.5 "));
        }
    }
}
