//! How far along a stage probably is, from time alone, when the agent has not said: the elapsed
//! time in the stage against the median of the same stage in this relay's recent turns of the
//! same harness, or else a share of recent turns' median length, or else a default; a median
//! only from at least `MIN_SAMPLES` (one earlier second says little of the next stage). In
//! memory and bounded (a restart starts with none); an estimate never reaches 100.
use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use hangar_agents::live::{Finished, Stage};

/// Durations kept per harness and stage, and of whole turns.
pub const KEEP: usize = 50;
/// The fewest durations a median is taken from; with fewer, the next basis is used.
pub const MIN_SAMPLES: usize = 5;
/// Harnesses remembered (the configured ones, in practice).
const MAX_HARNESSES: usize = 64;

/// What `stage_estimate` says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub pct: u8,
    pub elapsed_s: u64,
    pub typical_s: u64,
    pub basis: String,
    pub samples: usize,
}

#[derive(Debug, Default)]
pub struct Estimates {
    stages: HashMap<(String, Stage), VecDeque<f64>>,
    turns: VecDeque<f64>,
}

fn keep(q: &mut VecDeque<f64>, seconds: f64) {
    if !seconds.is_finite() || seconds < 0.0 {
        return;
    }
    q.push_back(seconds);
    while q.len() > KEEP {
        q.pop_front();
    }
}

pub fn median(samples: &VecDeque<f64>) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// A stage's share of a turn, when only turns' lengths are known.
fn share(stage: Stage) -> f64 {
    match stage {
        Stage::Plan => 0.15,
        Stage::Edit => 0.4,
        Stage::Test => 0.3,
        Stage::Pr => 0.15,
    }
}

/// Typical seconds when nothing is known yet.
fn default_seconds(stage: Stage) -> f64 {
    match stage {
        Stage::Plan => 120.0,
        Stage::Edit => 600.0,
        Stage::Test => 300.0,
        Stage::Pr => 120.0,
    }
}

impl Estimates {
    /// A stage of a `harness` turn ended.
    pub fn stage_done(&mut self, harness: &str, f: Finished) {
        let key = (harness.to_string(), f.stage);
        if !self.stages.contains_key(&key) && self.stages.len() >= MAX_HARNESSES * Stage::ALL.len() {
            return;
        }
        keep(self.stages.entry(key).or_default(), f.seconds);
    }

    /// A turn ended after `seconds`.
    pub fn turn_done(&mut self, seconds: f64) {
        keep(&mut self.turns, seconds);
    }

    /// `elapsed` seconds into `stage` of a `harness` turn.
    pub fn estimate(&self, harness: &str, stage: Stage, elapsed: f64) -> Estimate {
        let name = stage.as_str();
        let enough = |q: &&VecDeque<f64>| q.len() >= MIN_SAMPLES;
        let stages = self.stages.get(&(harness.to_string(), stage)).filter(enough);
        let (typical, basis, samples) = match stages {
            Some(q) => (median(q).unwrap_or(0.0), format!("median of {} recent {name} stages", q.len()), q.len()),
            None => match Some(&self.turns).filter(enough).and_then(median) {
                Some(m) => (
                    m * share(stage),
                    format!("a share of the median of {} recent turns", self.turns.len()),
                    self.turns.len(),
                ),
                None => (default_seconds(stage), "default".to_string(), 0),
            },
        };
        let typical = typical.max(1.0);
        let elapsed = elapsed.max(0.0);
        let pct = (100.0 * elapsed / typical).floor().min(99.0) as u8;
        Estimate { pct, elapsed_s: elapsed as u64, typical_s: typical.round() as u64, basis, samples }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_same_stage_and_harness_then_a_share_of_turns_then_a_default() {
        let mut e = Estimates::default();
        let d = e.estimate("claude-code", Stage::Test, 30.0);
        assert_eq!((d.typical_s, d.pct, d.samples, d.basis.as_str()), (300, 10, 0, "default"));

        // Fewer turns than a median is taken from: still the default.
        for s in [1000.0, 2000.0, 1500.0, 1000.0] {
            e.turn_done(s);
        }
        assert_eq!(e.estimate("claude-code", Stage::Test, 30.0).basis, "default");
        e.turn_done(2000.0);
        let t = e.estimate("claude-code", Stage::Test, 30.0);
        assert_eq!((t.typical_s, t.samples), (450, 5), "{t:?}");
        assert!(t.basis.contains("5 recent turns"), "{}", t.basis);

        // One short stage says little: a share of turns until there are five of the stage.
        e.stage_done("claude-code", Finished { stage: Stage::Test, seconds: 1.0 });
        let one = e.estimate("claude-code", Stage::Test, 10.0);
        assert_eq!((one.typical_s, one.pct, one.samples), (450, 2, 5), "{one:?}");
        for s in [10.0, 200.0, 20.0, 30.0] {
            e.stage_done("claude-code", Finished { stage: Stage::Test, seconds: s });
        }
        for _ in 0..MIN_SAMPLES {
            e.stage_done("codex", Finished { stage: Stage::Test, seconds: 5000.0 });
        }
        let s = e.estimate("claude-code", Stage::Test, 10.0);
        assert_eq!((s.typical_s, s.pct, s.elapsed_s, s.samples), (20, 50, 10, 5));
        assert_eq!(s.basis, "median of 5 recent test stages");
        // Never 100, however late.
        assert_eq!(e.estimate("claude-code", Stage::Test, 1e9).pct, 99);
    }

    #[test]
    fn samples_are_bounded() {
        let mut e = Estimates::default();
        for i in 0..(KEEP * 3) {
            e.stage_done("h", Finished { stage: Stage::Edit, seconds: i as f64 });
            e.turn_done(i as f64);
        }
        assert_eq!(e.estimate("h", Stage::Edit, 0.0).samples, KEEP);
        assert_eq!(e.turns.len(), KEEP);
        for i in 0..(MAX_HARNESSES * 10) {
            e.stage_done(&format!("h{i}"), Finished { stage: Stage::Pr, seconds: 1.0 });
        }
        assert!(e.stages.len() <= MAX_HARNESSES * Stage::ALL.len());
        assert_eq!(median(&VecDeque::from(vec![1.0, 3.0])), Some(2.0));
    }
}
