//! Tickets: what a browser's `EventSource` sends in place of a bearer header, which it cannot
//! set. A ticket opens one SSE `GET` once: it is bound to the token that asked for it and to one
//! path, and expires after a short lifetime (`HANGAR_TICKET_SECONDS`).
//!
//! Tickets live in memory only (a restart forgets them, as it may: they are for a stream about
//! to be opened). Like tokens, a ticket embeds its id (`hgt_<id>_<random>`) and the store keeps
//! only the SHA-256 of the whole, compared in constant time, so neither a memory dump nor a log
//! line shows a usable ticket.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine as _};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::random;

/// Unexpired tickets one token may hold at once (used ones count until they expire), so that a
/// token cannot fill the relay's memory.
pub const MAX_TICKETS_PER_TOKEN: usize = 64;

const TICKET_PREFIX: &str = "hgt_";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("MAX_TICKETS_PER_TOKEN: this token has {0} unexpired tickets (limit {0}); use them or let them expire")]
    TooMany(usize),
    #[error("unknown ticket")]
    Unknown,
    #[error("the ticket has expired")]
    Expired,
    #[error("the ticket was already used")]
    Used,
    #[error("the ticket is not for this path")]
    OtherPath,
}

/// A ticket as issued: the secret, shown once.
#[derive(Debug)]
pub struct Issued {
    pub ticket: String,
    /// Epoch seconds.
    pub expires_at: f64,
}

struct Ticket {
    hash: [u8; 32],
    token_id: String,
    path: String,
    expires: Instant,
    used: bool,
}

pub struct Tickets {
    lifetime: Duration,
    by_id: Mutex<HashMap<String, Ticket>>,
}

fn hash(ticket: &str) -> [u8; 32] {
    Sha256::digest(ticket.as_bytes()).into()
}

impl Tickets {
    pub fn new(lifetime: Duration) -> Tickets {
        Tickets { lifetime, by_id: Mutex::default() }
    }

    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ticket>> {
        // A panic while holding the lock leaves the map consistent (each change is one insert
        // or one field write), so a poisoned lock is still usable.
        self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A ticket for `token_id` to open `path` once, within the lifetime. Which paths take
    /// tickets is the API's to say (`api::auth::is_stream_path`): here a path is only a string
    /// the ticket is bound to.
    pub fn issue(&self, token_id: &str, path: &str) -> Result<Issued, TicketError> {
        let now = Instant::now();
        let mut map = self.lock();
        // Expired tickets are kept one lifetime longer, so that using one says "expired" rather
        // than "unknown"; past that they go. The map therefore holds at most about twice
        // MAX_TICKETS_PER_TOKEN tickets per token.
        map.retain(|_, t| t.expires + self.lifetime > now);
        let held = map.values().filter(|t| t.token_id == token_id && t.expires > now).count();
        if held >= MAX_TICKETS_PER_TOKEN {
            return Err(TicketError::TooMany(MAX_TICKETS_PER_TOKEN));
        }
        let id = random::hex(8);
        let ticket = format!("{TICKET_PREFIX}{id}_{}", B64.encode(random::bytes::<32>()));
        map.insert(
            id,
            Ticket {
                hash: hash(&ticket),
                token_id: token_id.to_string(),
                path: path.to_string(),
                expires: now + self.lifetime,
                used: false,
            },
        );
        Ok(Issued { ticket, expires_at: crate::time::now() + self.lifetime.as_secs_f64() })
    }

    /// Uses `presented` to open `path`: the token it was issued to. A ticket that matches is
    /// used up whatever the answer (another path included), so it never opens anything twice.
    pub fn redeem(&self, presented: &str, path: &str) -> Result<String, TicketError> {
        let id = presented
            .strip_prefix(TICKET_PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .map(|(id, _)| id)
            .ok_or(TicketError::Unknown)?;
        let mut map = self.lock();
        let t = map.get_mut(id).ok_or(TicketError::Unknown)?;
        if !bool::from(t.hash.ct_eq(&hash(presented))) {
            return Err(TicketError::Unknown);
        }
        if t.used {
            return Err(TicketError::Used);
        }
        t.used = true;
        if t.expires <= Instant::now() {
            return Err(TicketError::Expired);
        }
        if t.path != path {
            return Err(TicketError::OtherPath);
        }
        Ok(t.token_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_its_path_once() {
        let tickets = Tickets::new(Duration::from_secs(60));
        let path = "/api/sessions/x/events/stream";
        let a = tickets.issue("tok_1", path).unwrap();
        assert!(a.ticket.starts_with("hgt_") && a.ticket.len() > 40, "{}", a.ticket);
        assert_eq!(tickets.redeem(&a.ticket, path), Ok("tok_1".to_string()));
        assert_eq!(tickets.redeem(&a.ticket, path), Err(TicketError::Used));

        let b = tickets.issue("tok_1", path).unwrap();
        assert_eq!(tickets.redeem(&b.ticket, "/api/sessions/y/events/stream"), Err(TicketError::OtherPath));
        assert_eq!(tickets.redeem(&b.ticket, path), Err(TicketError::Used), "a wrong path uses it up");

        let c = tickets.issue("tok_1", path).unwrap();
        let mut forged = c.ticket.clone();
        forged.pop();
        assert_eq!(tickets.redeem(&forged, path), Err(TicketError::Unknown));
        assert_eq!(tickets.redeem("hgt_nope", path), Err(TicketError::Unknown));
        assert_eq!(tickets.redeem("", path), Err(TicketError::Unknown));
        assert_eq!(tickets.redeem(&c.ticket, path), Ok("tok_1".to_string()), "a forgery does not use it");
    }

    #[test]
    fn tickets_expire_and_are_capped() {
        let tickets = Tickets::new(Duration::from_millis(50));
        let path = "/api/sandboxes/default/watch";
        let a = tickets.issue("tok_1", path).unwrap();
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(tickets.redeem(&a.ticket, path), Err(TicketError::Expired));

        let tickets = Tickets::new(Duration::from_secs(60));
        for _ in 0..MAX_TICKETS_PER_TOKEN {
            tickets.issue("tok_1", path).unwrap();
        }
        assert_eq!(tickets.issue("tok_1", path).unwrap_err(), TicketError::TooMany(MAX_TICKETS_PER_TOKEN));
        assert!(tickets.issue("tok_2", path).is_ok(), "the cap is per token");
    }
}
