//! The relay's tests that every platform (`crate::platform`) runs where they apply: each case is
//! a `pub async fn(&Platform)`, listed by each platform's test file with `platform_cases!`.
//! - `sandboxes`: commands with and without the daemon, options, pause, removal, background
//!   processes without a daemon.
//! - `sessions`: agent turns followed or polled, the uid split, a sandbox destroyed or vanished
//!   under a turn.
//! - `jobs`: a job that creates its sandbox from a spec.
mod jobs;
mod sandboxes;
mod sessions;

pub use jobs::*;
pub use sandboxes::*;
pub use sessions::*;
