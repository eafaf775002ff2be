//! The channel through which a provider reports sandboxes whose backing resource vanished
//! outside hangar; `sessions::gone` receives it and makes them `gone`.
use std::collections::HashSet;

use tokio::sync::mpsc;

/// What a provider saw.
#[derive(Debug)]
pub enum Seen {
    /// The sandbox's resource vanished, for the reason given (the provider's words, for people).
    Vanished { sandbox_id: String, why: String },
    /// A full listing of what backs a provider's sandboxes, taken at `listed_at` (epoch
    /// seconds): its sandboxes created before then and not in `ids` vanished while nobody was
    /// watching (the relay was down, or the watch broken).
    Present { provider: &'static str, ids: HashSet<String>, listed_at: i64 },
}

/// A provider's side of the channel.
#[derive(Clone)]
pub struct GoneSender(mpsc::UnboundedSender<Seen>);

impl GoneSender {
    pub fn vanished(&self, sandbox_id: &str, why: &str) {
        let _ = self.0.send(Seen::Vanished { sandbox_id: sandbox_id.to_string(), why: why.to_string() });
    }

    pub fn present(&self, provider: &'static str, ids: HashSet<String>, listed_at: i64) {
        let _ = self.0.send(Seen::Present { provider, ids, listed_at });
    }
}

pub type GoneReceiver = mpsc::UnboundedReceiver<Seen>;

pub fn channel() -> (GoneSender, GoneReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    (GoneSender(tx), rx)
}
