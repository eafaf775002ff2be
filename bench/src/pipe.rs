//! Stamped lines read from another program's output (a peer: `docker exec`, `tail -F`), each
//! timed the moment its bytes arrive.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{
    error::{fail, IoContext, Result},
    stats::{now, Lines},
};

/// Reads `r` until `want` stamped lines have come, or it ends; fails after `limit`.
pub async fn read_stamped(what: &str, mut r: impl AsyncRead + Unpin, want: u64, limit: Duration) -> Result<Lines> {
    let mut lines = Lines::default();
    let mut buf = vec![0u8; 64 * 1024];
    let read = async {
        while (lines.numbers.len() as u64) < want {
            let n = r.read(&mut buf).await.ctx(format!("reading {what}"))?;
            if n == 0 {
                break;
            }
            lines.feed(&String::from_utf8_lossy(&buf[..n]), now());
        }
        Ok::<_, crate::error::BenchError>(())
    };
    tokio::time::timeout(limit, read).await.map_err(|_| fail(what, format!("no {want} lines within {limit:?}")))??;
    Ok(lines)
}
