//! Percentiles and the stamped lines every latency scenario measures.
//!
//! A line carries the wall-clock time it was written (`<n> <unix seconds>`, as bash's
//! `$EPOCHREALTIME` prints it); its delay is when the bench received it minus that stamp. The
//! bench, the host and the containers share one clock (one kernel), so no offset is involved.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{fail, Result};

/// Now, in seconds since the Unix epoch (the clock the stamps use).
pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A distribution's summary, in the unit of its samples (milliseconds for delays).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    /// The 0th to 100th percentiles, for plotting the distribution.
    pub percentiles: Vec<f64>,
}

impl Summary {
    /// Summarizes `samples`; an empty set is an error naming `what`, never a zero.
    pub fn of(what: &str, samples: &[f64]) -> Result<Summary> {
        if samples.is_empty() {
            return Err(fail(what, "no samples"));
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        Ok(Summary {
            n: s.len(),
            p50: percentile(&s, 50.0),
            p95: percentile(&s, 95.0),
            p99: percentile(&s, 99.0),
            max: s[s.len() - 1],
            mean: round3(mean),
            percentiles: (0..=100).map(|p| percentile(&s, p as f64)).collect(),
        })
    }
}

/// The nearest-rank percentile of sorted, non-empty samples, rounded to 3 decimals.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    round3(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `a / b` to 3 significant digits (ratios span from thousandths to thousands); `None` when
/// `b` is zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| significant(a / b, 3))
}

/// `x` rounded to `digits` significant digits.
pub fn significant(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// Text arriving in chunks, cut into stamped lines as it comes.
#[derive(Debug, Default)]
pub struct Lines {
    partial: String,
    /// Each stamped line's delay, in milliseconds, in the order received.
    pub delays_ms: Vec<f64>,
    /// The line numbers received, in order (to check none was lost or repeated).
    pub numbers: Vec<u64>,
    /// When each line was printed (Unix seconds), in the order received.
    pub stamps: Vec<f64>,
    /// When the first stamped line arrived (Unix seconds).
    pub first_at: Option<f64>,
}

impl Lines {
    /// Adds a chunk received at `at` (Unix seconds). Text without a stamp is ignored.
    pub fn feed(&mut self, text: &str, at: f64) {
        self.partial.push_str(text);
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            self.line(line.trim_end(), at);
        }
    }

    fn line(&mut self, line: &str, at: f64) {
        let mut parts = line.split_whitespace();
        let (Some(n), Some(stamp), None) = (parts.next(), parts.next(), parts.next()) else { return };
        let (Ok(n), Ok(stamp)) = (n.parse::<u64>(), stamp.parse::<f64>()) else { return };
        self.first_at.get_or_insert(at);
        self.numbers.push(n);
        self.stamps.push(stamp);
        self.delays_ms.push((at - stamp) * 1000.0);
    }

    /// Fails unless exactly lines 1..=n arrived, in order.
    pub fn check_complete(&self, what: &str, n: u64) -> Result<()> {
        let want: Vec<u64> = (1..=n).collect();
        if self.numbers == want {
            return Ok(());
        }
        Err(fail(
            what,
            format!(
                "expected lines 1..={n} in order, got {} lines (first {:?}, last {:?})",
                self.numbers.len(),
                self.numbers.first(),
                self.numbers.last()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of("t", &v).expect("summary");
        assert_eq!((s.p50, s.p95, s.p99, s.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(s.percentiles.len(), 101);
        assert_eq!(s.percentiles[0], 1.0);
        let one = Summary::of("t", &[7.0]).expect("summary");
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
    }

    #[test]
    fn ratios_keep_three_significant_digits() {
        assert_eq!(ratio(0.34, 492.0), Some(0.000691));
        assert_eq!(ratio(2.0, 3.0), Some(0.667));
        assert_eq!(ratio(3124.0, 1.0), Some(3120.0));
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn no_samples_is_an_error() {
        assert!(Summary::of("nothing", &[]).is_err());
    }

    #[test]
    fn lines_split_across_chunks() {
        let mut l = Lines::default();
        l.feed("1 100.000\n2 100.", 100.010);
        l.feed("100\nnoise\n3 100.200\n", 100.300);
        assert_eq!(l.numbers, vec![1, 2, 3]);
        let d: Vec<i64> = l.delays_ms.iter().map(|d| d.round() as i64).collect();
        assert_eq!(d, vec![10, 200, 100]);
        assert_eq!(l.first_at, Some(100.010));
        assert!(l.check_complete("t", 3).is_ok());
        assert!(l.check_complete("t", 4).is_err());
    }
}
