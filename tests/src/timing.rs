//! Bounded waiting: every wait in a test has a limit, so a hang fails the test with a message
//! saying what it waited for instead of blocking CI.
use std::{
    future::Future,
    time::{Duration, Instant},
};

/// The default bound on one step of a test (one awaited event, one call).
pub const STEP: Duration = Duration::from_secs(10);

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for: {what}"),
    }
}

/// One bound for a sequence of waits (reading a stream to its end, say): each wait gets what is
/// left of it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    pub fn after(limit: Duration) -> Deadline {
        Deadline { at: Instant::now() + limit, limit }
    }

    /// Runs `fut` within what is left of the bound; when it runs out, fails the test with
    /// "timed out after LIMIT " and `what()` (called only then, so it can describe the state).
    pub async fn run<T>(&self, fut: impl Future<Output = T>, what: impl FnOnce() -> String) -> T {
        match tokio::time::timeout(self.at.saturating_duration_since(Instant::now()), fut).await {
            Ok(v) => v,
            Err(_) => panic!("timed out after {:?} {}", self.limit, what()),
        }
    }
}

/// Polls `cond` every 20 ms until it holds; fails the test after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("condition not met within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` every 20 ms until it yields a value; fails the test after `limit`.
pub async fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("condition not met within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
