//! Giving freed heap memory back to the kernel, and keeping what a ring holds for long out of
//! the heap.
//!
//! glibc's malloc keeps the pages of memory freed in the middle of its heaps: only the top of a
//! heap shrinks by itself. Settling a quiet process's ring frees the blocks its reads landed in,
//! which lie anywhere in the heap, so without this the daemon's resident memory would stay at its
//! high-water mark of blocks after every burst of output.
use std::{
    ptr::NonNull,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Once,
    },
    time::Duration,
};

use bytes::Bytes;
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

/// At most this many pieces are mappings at once; more stay on the heap. Each mapping the kernel
/// cannot merge with a neighbour counts against `vm.max_map_count` (65,530 by default), which
/// the daemon's thread stacks, heaps and every start's child stack count against too: a daemon
/// kept large rings (`--ring-bytes`) of many processes must not run out of mappings to start
/// the next one. 16,384 pieces are 256 MiB of output.
const MAX_PAGE_PIECES: usize = 16 * 1024;

static PAGE_PIECES: AtomicUsize = AtomicUsize::new(0);

/// Bytes in pages of their own (an anonymous mapping of exactly their length, a whole number of
/// pages): the ring's full settled pieces, which a quiet process keeps for as long as it lives.
/// From malloc's heap each such piece took its pages plus 16 bytes of the next, among small
/// allocations that outlive it, so a trimmed ring left pages partly used that `malloc_trim` cannot
/// give back (measured: 1.5 MiB of resident heap beyond what was in use, with 64 full rings).
/// Unmapped, a piece's pages go back to the kernel at once.
struct Pages {
    ptr: NonNull<u8>,
    len: usize,
    /// The count this piece is in.
    count: &'static AtomicUsize,
}

// SAFETY: `Pages` owns its mapping; nothing else points into it, and it is only read after the
// copy in `page_backed`.
unsafe impl Send for Pages {}

impl AsRef<[u8]> for Pages {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, readable, initialized by `page_backed`, and lives
        // until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `page_backed` made, once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `data` copied into pages of its own, when its length is a whole number of pages; `None`
/// otherwise, past [`MAX_PAGE_PIECES`], or when the kernel refuses the mapping (the caller keeps
/// it on the heap).
pub fn page_backed(data: &[u8]) -> Option<Bytes> {
    page_backed_within(data, &PAGE_PIECES, MAX_PAGE_PIECES)
}

/// [`page_backed`], with at most `max` pieces counted in `count` at once.
fn page_backed_within(data: &[u8], count: &'static AtomicUsize, max: usize) -> Option<Bytes> {
    // SAFETY: sysconf takes no pointers.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    if data.is_empty() || page == 0 || !data.len().is_multiple_of(page) {
        return None;
    }
    if count.fetch_add(1, Ordering::Relaxed) >= max {
        count.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let piece = map_copy(data, count);
    if piece.is_none() {
        count.fetch_sub(1, Ordering::Relaxed);
    }
    piece
}

/// A counted piece: `data` in a fresh mapping of exactly its length.
fn map_copy(data: &[u8], count: &'static AtomicUsize) -> Option<Bytes> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            data.len(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return None;
    }
    let ptr = NonNull::new(at.cast::<u8>())?;
    // SAFETY: the mapping is data.len() bytes and writable; it cannot overlap `data`.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), data.len()) };
    Some(Bytes::from_owner(Pages { ptr, len: data.len(), count }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_are_copied_into_a_mapping_of_their_own() {
        // SAFETY: sysconf takes no pointers.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let data: Vec<u8> = (0..4 * page).map(|i| (i % 251) as u8).collect();
        let b = page_backed(&data).expect("whole pages");
        assert_eq!(&b[..], &data[..]);
        assert_eq!(b.as_ptr() as usize % page, 0, "page-aligned, so in pages of its own");
        let s = b.slice(100..200);
        drop(b);
        assert_eq!(&s[..], &data[100..200], "a slice keeps the mapping");
        assert!(page_backed(&data[..100]).is_none(), "a part of a page stays on the heap");
        assert!(page_backed(&[]).is_none());
    }

    #[test]
    fn past_the_limit_pieces_stay_on_the_heap_until_one_is_dropped() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        // SAFETY: sysconf takes no pointers.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let data = vec![7u8; page];
        let a = page_backed_within(&data, &COUNT, 2).expect("the first");
        let b = page_backed_within(&data, &COUNT, 2).expect("the second");
        assert!(page_backed_within(&data, &COUNT, 2).is_none(), "a third is over the limit");
        drop(a);
        let c = page_backed_within(&data, &COUNT, 2).expect("room again once one is unmapped");
        assert_eq!((&b[..], &c[..]), (&data[..], &data[..]));
        drop((b, c));
        assert_eq!(COUNT.load(Ordering::Relaxed), 0);
    }
}
