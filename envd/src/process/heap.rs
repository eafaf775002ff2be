//! Giving freed heap memory back to the kernel.
//!
//! glibc's malloc keeps the pages of memory freed in the middle of its heaps: only the top of a
//! heap shrinks by itself. Settling a quiet process's ring frees the blocks its reads landed in,
//! which lie anywhere in the heap, so without this the daemon's resident memory would stay at its
//! high-water mark of blocks after every burst of output.
use std::{sync::Once, time::Duration};

use tokio::sync::Notify;

/// How long a trim waits for more memory to be freed: settles come in bursts (every process
/// that printed at once goes quiet at once), and one trim walks every heap.
const GATHER: Duration = Duration::from_millis(200);

static FREED: Notify = Notify::const_new();
static TRIMMER: Once = Once::new();

/// Says that much memory was freed: the heaps' whole free pages go back to the kernel shortly,
/// in one trim for a burst of calls. Call from inside the runtime.
pub fn freed() {
    TRIMMER.call_once(|| {
        tokio::spawn(async {
            loop {
                FREED.notified().await;
                tokio::time::sleep(GATHER).await;
                trim();
            }
        });
    });
    FREED.notify_one();
}

fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
