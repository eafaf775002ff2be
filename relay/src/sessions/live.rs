//! Live readers of sessions' events: each session's last recorded seq, as a watch channel that
//! long polls, SSE streams and MCP subscriptions wait on. Readers then read the store; nothing
//! here holds events, so a slow reader holds up nobody.
use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use tokio::sync::watch;

#[derive(Default)]
pub struct Live {
    sessions: Mutex<HashMap<String, watch::Sender<i64>>>,
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<i64>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes when the session records events after `seq`.
    pub fn subscribe(&self, session_id: &str, seq: i64) -> watch::Receiver<i64> {
        let mut map = self.lock();
        // Senders nobody listens to any more go, so the map holds only watched sessions.
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.entry(session_id.to_string()).or_insert_with(|| watch::channel(seq).0).subscribe()
    }

    /// The session recorded events up to `seq`.
    pub fn publish(&self, session_id: &str, seq: i64) {
        if let Some(tx) = self.lock().get(session_id) {
            tx.send_if_modified(|last| {
                let newer = seq > *last;
                if newer {
                    *last = seq;
                }
                newer
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_sees_newer_seqs_only() {
        let live = Live::default();
        live.publish("s", 3); // nobody listens: dropped
        let mut rx = live.subscribe("s", 3);
        live.publish("s", 2);
        assert!(!rx.has_changed().unwrap());
        live.publish("s", 5);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 5);
    }
}
