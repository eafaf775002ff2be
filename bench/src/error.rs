//! The bench's one error type: which step failed and why. A benchmark that cannot measure what
//! it set out to (a lost line, a refused stream, a peer that is missing) fails with this rather
//! than reporting a number that means something else.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{what}: {detail}")]
    Step { what: String, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, BenchError>;

/// A failed step, with what was being done and what went wrong.
pub fn fail(what: impl Into<String>, detail: impl std::fmt::Display) -> BenchError {
    BenchError::Step { what: what.into(), detail: detail.to_string() }
}

/// Adds what was being done to an I/O error.
pub trait IoContext<T> {
    fn ctx(self, what: impl Into<String>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|source| BenchError::Io { what: what.into(), source })
    }
}
