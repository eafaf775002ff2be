//! The daemon's directory watches: their slots, and the polling form's watchers
//! (E2B's `CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher`), removed when nobody polls them.
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use super::{Change, Ended, Item, Slots, Watch, WatchError, WatchSpec};
use crate::events;

#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Directory watches that may run at once.
    pub max_watches: u32,
    /// Changes each watch queues for its consumer before it drops and counts them.
    pub queue_events: usize,
    /// A polled watcher nobody called for this long is removed.
    pub watcher_idle: Duration,
}

enum State {
    Live(Watch),
    /// Events were lost or the watch failed: every poll answers this until the watcher is
    /// removed, as E2B's envd does with a watcher's error. The watch itself is gone already,
    /// so its inotify instance and slot are free.
    Broken(WatchError),
}

struct Watcher {
    state: State,
    last_call: Instant,
    root: PathBuf,
}

pub struct Registry {
    settings: WatchSettings,
    slots: Slots,
    watchers: Mutex<HashMap<String, Watcher>>,
}

impl Registry {
    pub fn new(settings: WatchSettings) -> Arc<Registry> {
        Arc::new(Registry {
            slots: Slots::new(settings.max_watches, "directory watches"),
            settings,
            watchers: Mutex::default(),
        })
    }

    pub fn settings(&self) -> &WatchSettings {
        &self.settings
    }

    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    fn watchers(&self) -> MutexGuard<'_, HashMap<String, Watcher>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a watch in one of the daemon's slots.
    pub async fn watch(&self, spec: WatchSpec) -> Result<Watch, WatchError> {
        let slot = self.slots.acquire()?;
        Watch::start(spec, slot, self.settings.queue_events).await
    }

    /// Starts a polled watcher and returns its id.
    pub async fn create_watcher(&self, spec: WatchSpec) -> Result<String, WatchError> {
        let watch = self.watch(spec).await?;
        let id = new_id();
        let root = watch.root().to_path_buf();
        self.watchers().insert(id.clone(), Watcher { state: State::Live(watch), last_call: Instant::now(), root });
        Ok(id)
    }

    /// The changes since the last call. Events before a loss are answered first; the loss
    /// itself (and every later call) is `EventsLost`.
    pub fn watcher_events(&self, id: &str) -> Result<Vec<Change>, WatchError> {
        let mut all = self.watchers();
        let w = all.get_mut(id).ok_or_else(|| WatchError::NoWatcher(id.to_string()))?;
        w.last_call = Instant::now();
        let batch = match &w.state {
            State::Broken(e) => return Err(e.clone()),
            State::Live(watch) => watch.take(),
        };
        let mut changes = Vec::with_capacity(batch.items.len());
        let mut broken = None;
        for item in batch.items {
            match item {
                Item::Change { change, .. } => changes.push(change),
                Item::Overflow { dropped, .. } => {
                    events::WatchEventsLost { path: &w.root, dropped }.emit();
                    broken = Some(WatchError::EventsLost { dropped });
                    break;
                }
            }
        }
        if broken.is_none() {
            if let Some(Ended::Failed(e)) = batch.end {
                broken = Some(e);
            }
        }
        if let Some(e) = broken {
            w.state = State::Broken(e.clone());
            if changes.is_empty() {
                return Err(e);
            }
        }
        Ok(changes)
    }

    pub fn remove_watcher(&self, id: &str) -> Result<(), WatchError> {
        self.watchers().remove(id).map(drop).ok_or_else(|| WatchError::NoWatcher(id.to_string()))
    }

    /// How many polled watchers exist (live or broken).
    pub fn watcher_count(&self) -> usize {
        self.watchers().len()
    }

    /// Removes watchers nobody polled for `watcher_idle`. Runs until the daemon stops.
    pub async fn run_sweeper(self: Arc<Self>) {
        let idle = self.settings.watcher_idle;
        let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        loop {
            tokio::time::sleep(every).await;
            let expired: Vec<(String, Watcher)> = {
                let mut all = self.watchers();
                let ids: Vec<String> =
                    all.iter().filter(|(_, w)| w.last_call.elapsed() >= idle).map(|(id, _)| id.clone()).collect();
                ids.into_iter().filter_map(|id| all.remove(&id).map(|w| (id, w))).collect()
            };
            // Dropped outside the lock: dropping a watch logs.
            for (id, _) in expired {
                events::WatcherExpired { id: &id, idle_seconds: idle.as_secs() }.emit();
            }
        }
    }
}

/// A watcher id nobody can guess (ids are the only handle on a polled watcher's events).
fn new_id() -> String {
    let mut b = [0u8; 12];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Never expected; still unique, if guessable.
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return format!("w{:x}{:x}", t.as_nanos(), NEXT.fetch_add(1, Ordering::Relaxed));
    }
    b.iter().fold(String::from("w"), |mut s, x| {
        s.push_str(&format!("{x:02x}"));
        s
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_distinct() {
        let a = super::new_id();
        assert!(a.starts_with('w') && a.len() == 25, "{a}");
        assert_ne!(a, super::new_id());
    }
}
