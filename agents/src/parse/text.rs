//! Text: a CLI without structured output. Its lines make no events; the relay reports the run's
//! state and keeps the log's tail itself.

use crate::event::Event;

pub(super) fn feed(_line: &[u8]) -> Vec<Event> {
    Vec::new()
}
