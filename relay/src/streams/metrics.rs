//! The four `hangar_stream*` families, in one registry, rendered as Prometheus text.
use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

pub struct Metrics {
    registry: Registry,
    pub open: IntGaugeVec,
    pub closed: IntCounterVec,
    pub bytes: IntCounterVec,
    pub first_output: HistogramVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let open = IntGaugeVec::new(Opts::new("hangar_streams_open", "Open streams"), &["kind"]).expect("valid metric");
        let closed = IntCounterVec::new(Opts::new("hangar_streams", "Streams closed, by why"), &["kind", "reason"])
            .expect("valid metric");
        let bytes =
            IntCounterVec::new(Opts::new("hangar_stream_bytes", "Bytes streamed"), &["kind"]).expect("valid metric");
        let first_output = HistogramVec::new(
            HistogramOpts::new("hangar_stream_first_output_seconds", "From a stream's start to its first output")
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["kind"],
        )
        .expect("valid metric");
        let registry = Registry::new();
        for c in [
            Box::new(open.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(closed.clone()),
            Box::new(bytes.clone()),
            Box::new(first_output.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Metrics { registry, open, closed, bytes, first_output }
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding our own registry into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
