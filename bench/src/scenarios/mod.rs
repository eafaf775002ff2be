//! The scenarios, one module each, numbered as in docs/performance.md.

pub mod agents;
pub mod claude;
pub mod fleet;
pub mod follow;
pub mod memory;
pub mod scale;
pub mod starts;
pub mod streaming;
pub mod throughput;
pub mod turns;
pub mod watch;
