//! Golden files: each fixture's events, one JSON object per line, in `fixtures/<name>.events.jsonl`.
//!
//! `HANGAR_UPDATE_GOLDEN=1 cargo test -p hangar-agents` rewrites them; read the diff before
//! committing. The fixture goes through [`Lines`] in small chunks, as the relay feeds it.

use std::path::PathBuf;

use super::{Format, Parser};
use crate::lines::{Line, Lines};
use crate::Event;

const FIXTURES: [(&str, Format); 9] = [
    ("claude-stream-json-executor", Format::ClaudeStreamJson),
    ("claude-long-turn", Format::ClaudeStreamJson),
    ("claude-api-error", Format::ClaudeStreamJson),
    ("claude-rate-limit-rejected", Format::ClaudeStreamJson),
    ("claude-resume-missing", Format::ClaudeStreamJson),
    ("codex-exec-json-minimal", Format::CodexJsonl),
    ("codex-out-of-order", Format::CodexJsonl),
    ("codex-turn-failed", Format::CodexJsonl),
    ("gemini-banner", Format::GeminiStreamJson),
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn events(name: &str, format: Format) -> Vec<Event> {
    let bytes = std::fs::read(dir().join(format!("{name}.jsonl"))).unwrap();
    let mut lines = Lines::new(0);
    let mut parser = Parser::new(format);
    let mut out = Vec::new();
    for chunk in bytes.chunks(97) {
        for line in lines.push(chunk) {
            match line {
                Line::Text { bytes, .. } => out.extend(parser.feed(&bytes)),
                Line::Dropped { .. } | Line::Marked { .. } => panic!("{name}: no fixture line is that long or marked"),
            }
        }
    }
    assert_eq!(lines.pending(), 0, "{name}: the fixture ends with a newline");
    out
}

#[test]
fn fixtures_match_their_golden_events() {
    let update = std::env::var_os("HANGAR_UPDATE_GOLDEN").is_some();
    for (name, format) in FIXTURES {
        let got = events(name, format);
        let path = dir().join(format!("{name}.events.jsonl"));
        if update {
            let text: String = got.iter().map(|e| serde_json::to_string(e).unwrap() + "\n").collect();
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (HANGAR_UPDATE_GOLDEN=1 writes it)", path.display()));
        // Compared as text: exact, key order included (serde_json sorts keys).
        let got: Vec<String> = got.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        let want: Vec<&str> = want.lines().collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{name}: event {i}");
        }
        assert_eq!(got.len(), want.len(), "{name}: event count");
    }
}
