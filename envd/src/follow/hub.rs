//! One inotify instance for every follow of the daemon.
//!
//! The kernel allows `fs.inotify.max_user_instances` (128 by default) per user, and every
//! daemon that runs as root on a host shares that count: an instance per follow would stop a
//! host at about a hundred followed files. Follows instead share one instance, read by one task
//! that hands each event to the follows holding its watch descriptor.
//!
//! One instance gives one descriptor per inode, whoever added it: two follows of files in one
//! directory share the directory's watch. So a watch is counted by the follows holding it and
//! removed from the kernel when the last lets go; and masks are only ever added
//! (`IN_MASK_ADD`), so no follow narrows another's.
//!
//! A follow's mailbox is bounded: what it needs to know is that something happened to one of
//! its few watches (the masks seen on each, merged) and whether the kernel's queue overflowed,
//! not every event, so a follow whose reader is slow costs no memory while a file is written.
use std::{
    collections::HashMap,
    io,
    path::Path,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use nix::sys::inotify::{AddWatchFlags as M, WatchDescriptor};
use tokio::sync::Notify;

use crate::watch::inotify::{self, Inotify};

/// The daemon's shared instance, opened with the first follow.
#[derive(Clone, Default)]
pub struct Hub(Arc<Mutex<Table>>);

#[derive(Default)]
struct Table {
    /// The instance and the generation it belongs to; `None` until the first follow, and again
    /// after reading it failed (the next follow opens another).
    ino: Option<(Arc<Inotify>, u64)>,
    generation: u64,
    next_id: u64,
    boxes: HashMap<u64, Arc<Mailbox>>,
    /// Which follows hold each watch.
    holders: HashMap<WatchDescriptor, Vec<u64>>,
}

/// What happened since a follow last looked.
#[derive(Default)]
struct Pending {
    /// Each watch's masks, merged: a follow holds two or three watches.
    seen: Vec<(WatchDescriptor, M)>,
    overflow: bool,
    failed: Option<String>,
}

#[derive(Default)]
struct Mailbox {
    notify: Notify,
    pending: Mutex<Pending>,
}

/// What a follow is told when it wakes.
#[derive(Debug, Default)]
pub struct Woken {
    pub seen: Vec<(WatchDescriptor, M)>,
    /// The kernel's queue overflowed: some events may be missing, so look at everything again.
    pub overflow: bool,
}

/// One follow's share of the instance. Dropping it lets go of its watches.
pub struct Sub {
    hub: Hub,
    id: u64,
    ino: Arc<Inotify>,
    generation: u64,
    mailbox: Arc<Mailbox>,
    held: Vec<WatchDescriptor>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the table consistent: every change to it is one statement.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hub {
    /// A share of the instance, opening it (and its reader) if there is none. Must run inside the
    /// tokio runtime.
    pub fn subscribe(&self) -> io::Result<Sub> {
        let mut t = lock(&self.0);
        let (ino, generation) = match &t.ino {
            Some((ino, g)) => (ino.clone(), *g),
            None => {
                let ino = Arc::new(Inotify::new(inotify::open_raw()?)?);
                t.generation += 1;
                let g = t.generation;
                t.ino = Some((ino.clone(), g));
                tokio::spawn(read(self.clone(), ino.clone(), g));
                (ino, g)
            }
        };
        t.next_id += 1;
        let id = t.next_id;
        let mailbox = Arc::new(Mailbox::default());
        t.boxes.insert(id, mailbox.clone());
        Ok(Sub { hub: self.clone(), id, ino, generation, mailbox, held: Vec::new() })
    }

    /// Follows sharing the instance now, and watches held.
    pub fn counts(&self) -> (usize, usize) {
        let t = lock(&self.0);
        (t.boxes.len(), t.holders.len())
    }
}

/// Reads the instance for as long as it works, handing each event to its watch's holders.
async fn read(hub: Hub, ino: Arc<Inotify>, generation: u64) {
    let err = loop {
        let evs = match ino.read().await {
            Ok(evs) => evs,
            Err(e) => break e,
        };
        let mut t = lock(&hub.0);
        for ev in evs {
            if ev.mask.contains(M::IN_Q_OVERFLOW) {
                for b in t.boxes.values() {
                    lock(&b.pending).overflow = true;
                    b.notify.notify_one();
                }
                continue;
            }
            let Some(ids) = t.holders.get(&ev.wd) else { continue };
            for id in ids {
                if let Some(b) = t.boxes.get(id) {
                    let mut p = lock(&b.pending);
                    match p.seen.iter_mut().find(|(wd, _)| *wd == ev.wd) {
                        Some((_, m)) => *m |= ev.mask,
                        None => p.seen.push((ev.wd, ev.mask)),
                    }
                    drop(p);
                    b.notify.notify_one();
                }
            }
            // The kernel dropped the watch (its inode is gone, or the last holder removed it).
            if ev.mask.contains(M::IN_IGNORED) {
                t.holders.remove(&ev.wd);
            }
        }
    };
    // Every follow on this instance ends with the error; the next follow opens another.
    let mut t = lock(&hub.0);
    if t.ino.as_ref().is_some_and(|(_, g)| *g == generation) {
        t.ino = None;
        // The next instance numbers its watches from 1 again.
        t.holders.clear();
    }
    let why = format!("reading the shared inotify instance: {err}");
    for b in t.boxes.values() {
        lock(&b.pending).failed.get_or_insert_with(|| why.clone());
        b.notify.notify_one();
    }
}

impl Sub {
    /// Watches `path` (or adds `mask` to the watch this instance already has on its inode).
    pub fn add(&mut self, path: &Path, mask: M) -> io::Result<WatchDescriptor> {
        let mut t = lock(&self.hub.0);
        if t.ino.as_ref().is_none_or(|(_, g)| *g != self.generation) {
            return Err(io::Error::other("the shared inotify instance failed; follow again"));
        }
        let wd = inotify::add(self.ino.raw(), path, mask | mask_add())?;
        if !self.held.contains(&wd) {
            self.held.push(wd);
            t.holders.entry(wd).or_default().push(self.id);
        }
        Ok(wd)
    }

    /// Lets go of a watch; the kernel's is removed once no follow holds it.
    pub fn remove(&mut self, wd: WatchDescriptor) {
        let Some(i) = self.held.iter().position(|w| *w == wd) else { return };
        self.held.swap_remove(i);
        let mut t = lock(&self.hub.0);
        release(&mut t, self, wd);
    }

    /// Waits until something happened to one of this follow's watches.
    pub async fn next(&self) -> io::Result<Woken> {
        loop {
            {
                let mut p = lock(&self.mailbox.pending);
                if let Some(why) = &p.failed {
                    return Err(io::Error::other(why.clone()));
                }
                if p.overflow || !p.seen.is_empty() {
                    return Ok(Woken { seen: std::mem::take(&mut p.seen), overflow: std::mem::take(&mut p.overflow) });
                }
            }
            self.mailbox.notify.notified().await;
        }
    }
}

/// nix names no `IN_MASK_ADD`: add to a watch's mask instead of replacing it.
fn mask_add() -> M {
    M::from_bits_retain(libc::IN_MASK_ADD)
}

/// Lets go of `sub`'s hold on `wd`; the table's holders are the current instance's alone.
fn release(t: &mut Table, sub: &Sub, wd: WatchDescriptor) {
    if t.ino.as_ref().is_none_or(|(_, g)| *g != sub.generation) {
        return;
    }
    let Some(ids) = t.holders.get_mut(&wd) else { return };
    ids.retain(|h| *h != sub.id);
    if ids.is_empty() {
        t.holders.remove(&wd);
        sub.ino.remove(wd);
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let hub = self.hub.clone();
        let mut t = lock(&hub.0);
        t.boxes.remove(&self.id);
        for wd in std::mem::take(&mut self.held) {
            release(&mut t, self, wd);
        }
    }
}
