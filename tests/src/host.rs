//! What this machine provides: root, and skipping (or, under CI, failing) a test that needs
//! something it lacks.

/// Whether a test must be skipped because this machine lacks `what` (root, a mount). Under
/// `CI=true` a missing capability fails the test instead: CI runs as root and a skip there would
/// count as a pass.
pub fn skip_without(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must provide {what} for this test");
    eprintln!("skipped: needs {what}");
    true
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}
