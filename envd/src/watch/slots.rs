//! The daemon-wide bound on watches and follows: each holds one inotify instance, and the kernel
//! allows only `fs.inotify.max_user_instances` (128 by default) per user, shared with every other
//! program in the sandbox running as the daemon's user.
use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("at most {max} watches and follows may run at once; end one first")]
pub struct SlotsFull {
    pub max: u32,
}

#[derive(Debug)]
struct Counter {
    max: u32,
    used: AtomicU32,
}

/// Hands out at most `max` slots at a time.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Counter>);

/// One slot; dropping it frees it.
#[derive(Debug)]
pub struct Slot(Arc<Counter>);

impl Slots {
    pub fn new(max: u32) -> Slots {
        Slots(Arc::new(Counter { max, used: AtomicU32::new(0) }))
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
            .map_err(|_| SlotsFull { max: c.max })
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
        let s = Slots::new(2);
        let a = s.acquire().expect("first");
        let _b = s.acquire().expect("second");
        assert_eq!(s.acquire().unwrap_err().max, 2);
        drop(a);
        assert!(s.acquire().is_ok());
        assert_eq!(s.in_use(), 1);
    }
}
