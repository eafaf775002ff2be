//! hangar-fuzz: every parser of untrusted bytes in hangar-envd and hangar-relay, as fuzz targets.
//!
//! Each target is one byte-level harness (`Target::run`: AFL++ feeds it through
//! `hangar-fuzz-afl`, `hangar-fuzz replay` feeds it saved inputs) and one set of proptest
//! properties (`Target::props`) whose generators build well-formed-ish inputs from parts and
//! check what the parser must make of them. A property's case is turned into the same bytes
//! the harness reads and run through the harness too, so every failure, from either tool, is a
//! file `hangar-fuzz replay` reproduces.
//!
//! A harness asserts more than "no panic" wherever it can: a decoded message re-encodes to
//! itself, a parsed offset is the one written, an error is the typed error its caller maps to
//! a status, with a message. A violated check is a panic, which both tools report as a crash.
//!
//! Invariant: links the parsers and calls them as pure functions; no I/O beyond reading its
//! inputs (and `hangar-fuzz` writing a failing case where it is told to).
pub mod input;
pub mod targets;

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// A failing property case: why, and the harness input that reproduces it.
#[derive(Debug)]
pub struct Failure {
    pub reason: String,
    pub input: Vec<u8>,
}

/// How many cases each property runs, from which seed; counts the cases run.
pub struct Runs {
    pub cases: u32,
    pub seed: u64,
    /// Properties run so far (each gets its own seed from `seed`).
    pub properties: u64,
    /// When set, properties are not checked: `cases` generated inputs of each are collected
    /// here instead (the seeds of a corpus).
    pub samples: Option<Vec<Vec<u8>>>,
}

impl Runs {
    pub fn new(cases: u32, seed: u64) -> Runs {
        Runs { cases, seed, properties: 0, samples: None }
    }

    /// A fresh runner per property: a `TestRunner` counts its successes across `run` calls, so
    /// a reused one would run later properties for no case at all.
    fn runner(&mut self) -> TestRunner {
        self.properties += 1;
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&self.properties.to_le_bytes());
        let config = Config { cases: self.cases, failure_persistence: None, ..Config::default() };
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
    }
}

/// Runs one property: `strategy`'s cases, each turned into harness bytes by `to_input`, through
/// `check` (which panics on a violation, as the harness does). The shrunk failing case comes back
/// with its bytes.
pub fn property<S, F>(runs: &mut Runs, strategy: S, to_input: fn(&S::Value) -> Vec<u8>, check: F) -> Result<(), Failure>
where
    S: proptest::strategy::Strategy,
    S::Value: std::fmt::Debug,
    F: Fn(&S::Value),
{
    let mut runner = runs.runner();
    if let Some(samples) = &mut runs.samples {
        for _ in 0..runs.cases {
            let tree = proptest::strategy::Strategy::new_tree(&strategy, &mut runner)
                .map_err(|reason| Failure { reason: format!("generating: {reason}"), input: Vec::new() })?;
            samples.push(to_input(&proptest::strategy::ValueTree::current(&tree)));
        }
        return Ok(());
    }
    let result = runner.run(&strategy, |case| {
        // proptest catches the panic of a failed check; a case is its own reproduction.
        check(&case);
        Ok::<(), TestCaseError>(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(proptest::test_runner::TestError::Fail(reason, case)) => {
            Err(Failure { reason: format!("{reason} (case: {case:?})"), input: to_input(&case) })
        }
        Err(proptest::test_runner::TestError::Abort(reason)) => {
            Err(Failure { reason: format!("aborted: {reason}"), input: Vec::new() })
        }
    }
}

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// What it covers, for `hangar-fuzz list` and docs/reliability.md.
    pub about: &'static str,
    /// The byte-level harness.
    pub run: fn(&[u8]),
    /// The structured properties.
    pub props: fn(&mut Runs) -> Result<(), Failure>,
}

/// Every target, in the order the runs go through them.
pub fn targets() -> &'static [Target] {
    targets::ALL
}

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    targets::ALL.iter().find(|t| t.name == name)
}
