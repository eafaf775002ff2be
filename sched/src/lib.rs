//! The serving threads' CPU scheduling: a short EEVDF slice (Linux 6.12 and newer), so that when
//! a sandbox's command writes a line on a busy CPU, hangar-envd (and then hangar-relay) runs ahead
//! of the writer instead of waiting for it to use up its slice (1.4 ms on 2 vCPUs by default).
//! A line's work is tens of microseconds, mostly inside 100 µs; docs/performance.md measures
//! what the slice changes.
//!
//! **Invariant:** one system call each way and nothing else: no runtime, no logging (callers
//! report a refusal in their own events).
//!
//! The request is a preference, never a privilege: a fair-class thread may shorten its own slice
//! without `CAP_SYS_NICE`, its share of the CPU stays what its nice value says, and
//! `SCHED_FLAG_RESET_ON_FORK` keeps threads and processes started from it (the blocking pool,
//! the sandbox's commands) on the kernel's default (which also gives them a nice value of 0 if
//! the daemon was started with a negative one).
use std::{
    io,
    sync::atomic::{AtomicBool, Ordering},
};

/// The shortest slice the kernel accepts (it clamps custom slices to 0.1–100 ms).
pub const MIN_SLICE_US: u32 = 100;
/// The longest slice the kernel accepts.
pub const MAX_SLICE_US: u32 = 100_000;
/// The slice hangar asks for unless told otherwise: the shortest.
pub const DEFAULT_SLICE_US: u32 = MIN_SLICE_US;

/// A `--sched-slice-us` value: 0 (the kernel's default) or from [`MIN_SLICE_US`] to
/// [`MAX_SLICE_US`]; a clap `value_parser`.
pub fn parse_slice_us(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n == 0 || (MIN_SLICE_US..=MAX_SLICE_US).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not 0 or a number of microseconds from {MIN_SLICE_US} to {MAX_SLICE_US}")),
    }
}

/// For a runtime's thread-start hook: asks for `slice_us` (nothing for 0) and calls `refused`
/// with the kernel's error the first time in this process that it refuses, so that a pool which
/// starts threads all day reports a refusal once.
pub fn request_for_thread(slice_us: u32, refused: impl FnOnce(&io::Error)) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if slice_us == 0 {
        return;
    }
    if let Err(error) = request_slice(slice_us) {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            refused(&error);
        }
    }
}

/// Asks the kernel to run the calling thread with a `slice_us` scheduling slice, keeping its
/// policy (fair) and nice value. Kernels before 6.12 accept and ignore it; refusals (seccomp, a
/// real-time policy set by a supervisor) come back as the error.
pub fn request_slice(slice_us: u32) -> io::Result<()> {
    let mut attr = attributes(0)?;
    if attr.sched_policy != libc::SCHED_OTHER as u32 && attr.sched_policy != libc::SCHED_BATCH as u32 {
        // A supervisor chose another class (real-time, idle): that choice stands.
        return Err(io::Error::other(format!("the thread runs under scheduling policy {}", attr.sched_policy)));
    }
    attr.sched_flags = libc::SCHED_FLAG_RESET_ON_FORK as u64;
    attr.sched_runtime = u64::from(slice_us.clamp(MIN_SLICE_US, MAX_SLICE_US)) * 1000;
    // SAFETY: `attr` is a fully initialised `sched_attr` whose `size` field says how much the
    // kernel may read; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Thread `tid`'s slice in microseconds (0: the calling thread), as the kernel reports it: its
/// custom slice or the default one (6.12 and newer), always 0 before. Anyone may read any
/// thread's.
pub fn slice_us(tid: u32) -> io::Result<u64> {
    Ok(attributes(tid)?.sched_runtime / 1000)
}

/// Whether this kernel honours custom slices for fair threads (Linux 6.12 and newer), read from
/// its release; `false` if that cannot be read.
pub fn kernel_honours_custom_slices() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (6, 12)
}

fn attributes(tid: u32) -> io::Result<libc::sched_attr> {
    let mut attr = libc::sched_attr {
        size: 0,
        sched_policy: 0,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: 0,
        sched_deadline: 0,
        sched_period: 0,
    };
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that large.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut libc::sched_attr, size, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    attr.size = size;
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a thread of its own, so the test runner's threads keep their scheduling.
    #[test]
    fn a_requested_slice_is_reported_back_and_not_inherited() {
        std::thread::spawn(|| {
            let before = slice_us(0).expect("sched_getattr");
            request_slice(MIN_SLICE_US).expect("sched_setattr");
            let after = slice_us(0).expect("sched_getattr");
            // Kernels before 6.12 ignore the slice and report 0 either way.
            if kernel_honours_custom_slices() {
                assert_eq!(after, u64::from(MIN_SLICE_US));
            } else {
                assert_eq!(after, before);
            }
            let child = std::thread::spawn(|| slice_us(0).expect("sched_getattr")).join().expect("join");
            assert_eq!(child, before, "a thread started from it keeps the default");
        })
        .join()
        .expect("join");
    }

    #[test]
    fn slice_flags_are_zero_or_within_the_kernels_range() {
        assert_eq!(parse_slice_us("0"), Ok(0));
        assert_eq!(parse_slice_us("100"), Ok(100));
        assert_eq!(parse_slice_us("100000"), Ok(100_000));
        for bad in ["99", "100001", "-1", "short", ""] {
            let error = parse_slice_us(bad).expect_err(bad);
            assert!(error.contains("from 100 to 100000"), "{bad}: {error}");
        }
    }

    #[test]
    fn slices_outside_the_kernels_range_are_clamped() {
        std::thread::spawn(|| {
            request_slice(1).expect("sched_setattr");
            if kernel_honours_custom_slices() {
                assert_eq!(slice_us(0).expect("sched_getattr"), u64::from(MIN_SLICE_US));
            }
            request_slice(u32::MAX).expect("sched_setattr");
            if kernel_honours_custom_slices() {
                assert_eq!(slice_us(0).expect("sched_getattr"), u64::from(MAX_SLICE_US));
            }
        })
        .join()
        .expect("join");
    }
}
