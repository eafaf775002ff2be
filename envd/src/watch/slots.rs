//! Daemon-wide bounds: on directory watches (each holds one inotify instance, and the kernel
//! allows only `fs.inotify.max_user_instances`, 128 by default, per user, shared with every other
//! program running as the daemon's user) and on follows (each holds an open file and a buffer).
use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("at most {max} {what} may run at once; end one first")]
pub struct SlotsFull {
    pub max: u32,
    /// What the slots are for, plural: "directory watches", "follows".
    pub what: &'static str,
}

#[derive(Debug)]
struct Counter {
    max: u32,
    what: &'static str,
    used: AtomicU32,
}

/// Hands out at most `max` slots at a time.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Counter>);

/// One slot; dropping it frees it.
#[derive(Debug)]
pub struct Slot(Arc<Counter>);

impl Slots {
    pub fn new(max: u32, what: &'static str) -> Slots {
        Slots(Arc::new(Counter { max, what, used: AtomicU32::new(0) }))
    }

    pub fn max(&self) -> u32 {
        self.0.max
    }

    pub fn in_use(&self) -> u32 {
        self.0.used.load(Ordering::Acquire)
    }

    pub fn acquire(&self) -> Result<Slot, SlotsFull> {
        let c = &self.0;
        c.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < c.max).then_some(n + 1))
            .map(|_| Slot(c.clone()))
            .map_err(|_| SlotsFull { max: c.max, what: c.what })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_freed_on_drop() {
        let s = Slots::new(2, "follows");
        let a = s.acquire().expect("first");
        let _b = s.acquire().expect("second");
        let full = s.acquire().unwrap_err();
        assert_eq!(full.max, 2);
        assert_eq!(full.to_string(), "at most 2 follows may run at once; end one first");
        drop(a);
        assert!(s.acquire().is_ok());
        assert_eq!(s.in_use(), 1);
    }
}
