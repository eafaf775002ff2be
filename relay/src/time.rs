//! Time as the API shows it everywhere (routes, tools, events): Unix epoch seconds as a JSON
//! number, fractional where sub-second matters. Stored rows keep whole seconds.
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the epoch, with fractions.
pub type Epoch = f64;

/// Now, to the microsecond.
pub fn now() -> Epoch {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| round_micros(d.as_secs_f64())).unwrap_or(0.0)
}

/// Now, in whole seconds (what the store keeps).
pub fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// A protobuf timestamp (as the daemon reports times) in epoch seconds.
pub fn of_timestamp(t: &hangar_proto::Timestamp) -> Epoch {
    round_micros(t.seconds as f64 + f64::from(t.nanos) / 1e9)
}

/// Microseconds are as fine as anything the relay reports; fewer digits read better.
fn round_micros(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_become_fractional_seconds() {
        let t = hangar_proto::Timestamp { seconds: 1_764_525_600, nanos: 250_000_000 };
        assert_eq!(of_timestamp(&t), 1_764_525_600.25);
        assert!((now() - now_secs() as f64).abs() < 2.0);
    }
}
