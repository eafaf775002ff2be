//! Where the store's SQL runs: never on a runtime worker.
//!
//! - **One writer thread** owns the only connection that writes. Callers send it a closure and
//!   await its answer; it commits the writes that queued up while it was busy together, each in a
//!   savepoint of one transaction (group commit), so a burst of event batches costs one commit.
//! - **A syncer thread** syncs the WAL for the writes that ask to outlive a power loss
//!   (`Durability::Durable`), once for all those committed by then, and answers them; the writer
//!   commits on meanwhile, so a sync delays only the writes that asked for it.
//! - **Readers** run on tokio's blocking pool, each on a connection of a small pool: WAL lets them
//!   read beside the writer, so a read never queues behind a commit.
//! - **A checkpointer thread** moves the WAL into the database file on a connection of its own,
//!   beside the writer: SQLite's automatic checkpoint would run inside the writer's commit, with
//!   two fsyncs, and every write queued behind it would wait (the tails of issue 36's fleet).
//!   Only a WAL the checkpointer cannot keep up with is checkpointed by the writer itself.
//!
//! A debug build checks that a connection is used only on these threads (`on_store_thread`), so a
//! store call that blocks a runtime worker fails the tests instead of slowing every stream.
use std::{
    cell::Cell,
    path::{Path, PathBuf},
    sync::{mpsc, Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use rusqlite::{Connection, OpenFlags};

use super::{Result, StoreError};
use crate::events;

/// How much a write must survive once its call has returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A kernel crash or a power loss may take it back: what is read again from its source after a
    /// restart (a turn's events with the log offset they were read up to, in one transaction, so
    /// both roll back together and the log is read again from there), or refreshed on its own
    /// (plan usage). A crash of the relay alone loses nothing: the commit is in the WAL file.
    Replayable,
    /// Synced to disk before the call returns (and with it every write committed before it):
    /// what a client or an agent was told happened (a token, a sandbox, a decision, a turn's
    /// state).
    Durable,
}

/// A store connection, usable only on the store's threads: a debug build panics when one is used
/// anywhere else, such as on a runtime worker.
pub struct Conn(Connection);

/// Statements each connection keeps prepared: every statement the store runs, with room.
const STATEMENTS_KEPT: usize = 256;

/// The store runs the same few statements all day: these take each from the connection's cache
/// instead of compiling it again (which was a quarter of the relay's CPU under load). They stand
/// in for `Connection`'s own methods of the same names.
impl Conn {
    fn new(conn: Connection) -> Conn {
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        // The query planner's stability guarantee: plans do not depend on the values bound. The
        // bundled SQLite has STAT4, whose planner otherwise marks a statement with a range on an
        // indexed column (`seq > ?2`) to be compiled again whenever its bound values change, which
        // made the statement cache useless for the reads that run most.
        if let Err(e) = conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true) {
            events::StoreWriteFailed { what: "query planner stability", error: &e.to_string() }.emit();
        }
        Conn(conn)
    }

    pub fn prepare(&self, sql: &str) -> rusqlite::Result<rusqlite::CachedStatement<'_>> {
        (**self).prepare_cached(sql)
    }

    pub fn execute<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare(sql)?.execute(params)
    }

    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare(sql)?.query_row(params, f)
    }

    /// Every row of a query, each through `f`, collected (a `Vec`, a map).
    pub fn query_rows<T, C, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<C>
    where
        C: FromIterator<T>,
        P: rusqlite::Params,
        F: FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare(sql)?.query_map(params, f)?.collect()
    }
}

impl std::ops::Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        debug_assert!(on_store_thread(), "a store connection used off the store's threads (a runtime worker?)");
        &self.0
    }
}

/// A write's closure (given the connection, or why it cannot run), then what to tell its caller
/// once the transaction is settled.
type Run = Box<dyn FnOnce(std::result::Result<&Conn, &str>) -> (bool, Settle) + Send>;
type Settle = Box<dyn FnOnce(Option<&str>) + Send>;

struct Job {
    durability: Durability,
    /// Runs outside any transaction and never with another write (a vacuum, a checkpoint).
    alone: bool,
    run: Run,
}

/// Writes committed together at most: a batch holds the writer's transaction open no longer than
/// these take.
const MAX_BATCH: usize = 64;
/// Reads at once, each on a connection of its own kept open between reads: more would only
/// queue for the same cores, and every one past them would open a connection for one read.
const READERS: usize = 8;

/// WAL pages past which the checkpointer is asked to run (SQLite's own automatic checkpoint's,
/// 4 MiB of 4 KiB pages).
const CHECKPOINT_PAGES: i32 = 1000;
/// WAL pages past which the writer checkpoints itself, holding writes back: the checkpointer did
/// not keep up (the WAL's pages can be reused only once all of them are in the database file).
const WRITER_CHECKPOINT_PAGES: i32 = 16 * CHECKPOINT_PAGES;
/// The checkpointer runs at most this often: each run syncs the WAL and the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

thread_local! {
    static STORE_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread may use a store connection now: the writer, or a reader inside its read.
pub(super) fn on_store_thread() -> bool {
    STORE_THREAD.with(Cell::get)
}

/// Marks this thread as the store's for as long as the guard lives.
struct StoreThread(bool);

impl StoreThread {
    fn enter() -> StoreThread {
        StoreThread(STORE_THREAD.with(|c| c.replace(true)))
    }
}

impl Drop for StoreThread {
    fn drop(&mut self) {
        STORE_THREAD.with(|c| c.set(self.0));
    }
}

pub(super) struct Threads {
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    /// The writer's, the syncer's and the checkpointer's, joined in this order when the store goes.
    thread: Mutex<Vec<JoinHandle<()>>>,
    readers: Arc<Readers>,
    path: PathBuf,
}

struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Conn>>,
    /// A permit for each connection: a read waits for one before it takes a thread.
    permits: tokio::sync::Semaphore,
}

impl Threads {
    /// Takes over `conn`, migrated already, as the writer's.
    pub(super) fn start(
        mut conn: Connection,
        path: &Path,
        on_start: impl Fn() + Clone + Send + 'static,
    ) -> Result<Threads> {
        let (tx, rx) = mpsc::channel();
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let checkpointer = Connection::open(path)?;
        checkpointer.pragma_update(None, "busy_timeout", 5000)?;
        // A nudge waiting is enough: the checkpointer takes everything committed by then.
        let (nudge, nudged) = mpsc::sync_channel::<()>(1);
        // Replaces SQLite's automatic checkpoint, which the same hook implements.
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages >= WRITER_CHECKPOINT_PAGES {
                // Busy while the checkpointer runs; an error here would fail a commit that
                // happened, so it is only logged.
                if let Err(e) = wal.checkpoint() {
                    events::StoreWriteFailed { what: "checkpoint by the writer", error: &e.to_string() }.emit();
                }
            } else if pages >= CHECKPOINT_PAGES {
                let _ = nudge.try_send(());
            }
            Ok(())
        }))?;
        let (sync_tx, sync_rx) = mpsc::channel();
        let spawn = |name: &str, run: Box<dyn FnOnce() + Send>| {
            let on_start = on_start.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    on_start();
                    run()
                })
                .map_err(StoreError::Io)
        };
        let writer_thread = spawn("hangar-store", Box::new(move || writer(Conn::new(conn), rx, sync_tx)))?;
        // Both end when the writer has: its sender and its connection's hook are theirs.
        let sync_thread = spawn("hangar-sync", Box::new(move || syncs(wal, sync_rx)))?;
        let checkpoint_thread =
            spawn("hangar-checkpoint", Box::new(move || checkpoints(Conn::new(checkpointer), nudged)))?;
        Ok(Threads {
            writer: Mutex::new(Some(tx)),
            thread: Mutex::new(vec![writer_thread, sync_thread, checkpoint_thread]),
            readers: Arc::new(Readers {
                path: path.to_path_buf(),
                idle: Mutex::new(Vec::new()),
                permits: tokio::sync::Semaphore::new(READERS),
            }),
            path: path.to_path_buf(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on a reader connection, off the runtime's workers.
    pub(super) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> Result<T> + Send + 'static,
    {
        let readers = self.readers.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let _permit = self.readers.permits.acquire().await.map_err(|_| StoreError::Closed)?;
                rt.spawn_blocking(move || readers.read(f)).await.map_err(|e| StoreError::Thread(e.to_string()))?
            }
            // Outside a runtime (a tool, a unit test without one) this thread may block.
            Err(_) => readers.read(f),
        }
    }

    /// Runs `f` on the writer's connection, inside a savepoint of the writer's transaction: its
    /// error undoes its own writes only. Its result comes back once the transaction committed.
    pub(super) async fn write<T, F>(&self, durability: Durability, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> Result<T> + Send + 'static,
    {
        self.submit(durability, false, f).await
    }

    /// Runs `f` on the writer's connection outside any transaction, with no other write beside it.
    pub(super) async fn alone<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> Result<T> + Send + 'static,
    {
        self.submit(Durability::Durable, true, f).await
    }

    async fn submit<T, F>(&self, durability: Durability, alone: bool, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let run: Run = Box::new(move |conn| {
            let result = match conn {
                Ok(conn) => f(conn),
                Err(why) => Err(StoreError::Commit(why.to_string())),
            };
            let ok = result.is_ok();
            let settle: Settle = Box::new(move |failed: Option<&str>| {
                let result = match (result, failed) {
                    (Ok(_), Some(why)) => Err(StoreError::Commit(why.to_string())),
                    (result, _) => result,
                };
                let _ = tx.send(result);
            });
            (ok, settle)
        });
        let sent = match self.writer.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(w) => w.send(Job { durability, alone, run }).is_ok(),
            None => false,
        };
        if !sent {
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

impl Drop for Threads {
    /// Lets the writer finish what was sent and close its connection before the store is gone:
    /// a store opened again on the same file finds it settled.
    fn drop(&mut self) {
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        for t in std::mem::take(&mut *self.thread.lock().unwrap_or_else(|p| p.into_inner())) {
            let _ = t.join();
        }
    }
}

impl Readers {
    fn read<T>(&self, f: impl FnOnce(&Conn) -> Result<T>) -> Result<T> {
        let _marked = StoreThread::enter();
        let conn = match self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < READERS {
            idle.push(conn);
        }
        result
    }
}

fn open_reader(path: &Path) -> Result<Conn> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.pragma_update(None, "busy_timeout", 5000)?;
    Ok(Conn::new(conn))
}

/// The writer thread: takes what is queued, commits it together, answers each caller.
///
/// The connection runs with `synchronous=NORMAL` (a commit is in the WAL file, synced at
/// checkpoints); a batch holding a `Durable` write has the syncer sync the WAL file, which makes
/// every commit so far durable. Switching the pragma between batches instead would expire every
/// prepared statement of the connection each time.
fn writer(conn: Conn, rx: mpsc::Receiver<Job>, syncer: mpsc::Sender<Vec<Settle>>) {
    let _marked = StoreThread::enter();
    if let Err(e) = conn.pragma_update(None, "synchronous", "NORMAL") {
        events::StoreWriteFailed { what: "synchronous", error: &e.to_string() }.emit();
    }
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        if first.alone {
            let (_, settle) = guarded(&conn, first.run);
            settle(None);
            continue;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) if j.alone => {
                    next = Some(j);
                    break;
                }
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        commit(&conn, batch, &syncer);
    }
}

/// The checkpointer thread: a passive checkpoint (it waits for no reader or writer) each time
/// the writer's WAL passed `CHECKPOINT_PAGES`, at most every `CHECKPOINT_EVERY`.
fn checkpoints(conn: Conn, nudged: mpsc::Receiver<()>) {
    let _marked = StoreThread::enter();
    while nudged.recv().is_ok() {
        let began = Instant::now();
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            events::StoreWriteFailed { what: "checkpoint", error: &e.to_string() }.emit();
        }
        std::thread::sleep(CHECKPOINT_EVERY.saturating_sub(began.elapsed()));
    }
}

/// Syncs the WAL file's data: what `synchronous=FULL` does after a commit.
fn sync_wal(wal: &Path) -> std::io::Result<()> {
    std::fs::File::open(wal)?.sync_data()
}

/// One transaction for the batch, a savepoint for each write in it. Once it committed, the
/// replayable writes are answered; the durable ones go to the syncer, which answers them once the
/// WAL is synced, while this thread commits the next batch.
fn commit(conn: &Conn, batch: Vec<Job>, syncer: &mpsc::Sender<Vec<Settle>>) {
    let n = batch.len();
    if let Err(e) = conn.execute("BEGIN IMMEDIATE", []) {
        let why = e.to_string();
        events::StoreWriteFailed { what: "begin", error: &why }.emit();
        for job in batch {
            let (_, settle) = (job.run)(Err(&why));
            settle(None);
        }
        return;
    }
    let mut settles = Vec::with_capacity(n);
    for job in batch {
        let _ = conn.execute("SAVEPOINT w", []);
        let durable = job.durability == Durability::Durable;
        let (ok, settle) = guarded(conn, job.run);
        if !ok {
            let _ = conn.execute("ROLLBACK TO w", []);
        }
        let _ = conn.execute("RELEASE w", []);
        settles.push((durable, settle));
    }
    if let Err(e) = conn.execute("COMMIT", []) {
        let _ = conn.execute("ROLLBACK", []);
        let why = e.to_string();
        events::StoreWriteFailed { what: "commit", error: &why }.emit();
        for (_, settle) in settles {
            settle(Some(&why));
        }
        return;
    }
    let mut to_sync = Vec::new();
    for (durable, settle) in settles {
        if durable {
            to_sync.push(settle);
        } else {
            settle(None);
        }
    }
    if !to_sync.is_empty() {
        if let Err(mpsc::SendError(left)) = syncer.send(to_sync) {
            // The syncer is gone only when the store is: committed, not known to be synced.
            for settle in left {
                settle(Some("the store is closing"));
            }
        }
    }
}

/// The syncer thread: syncs the WAL once for every durable write committed by then (those that
/// queued while it synced included), then answers them. A failed sync is each one's error:
/// committed, but not known to survive a power loss.
fn syncs(wal: PathBuf, rx: mpsc::Receiver<Vec<Settle>>) {
    while let Ok(first) = rx.recv() {
        let mut settles = first;
        while let Ok(more) = rx.try_recv() {
            settles.extend(more);
        }
        let failed = sync_wal(&wal).err().map(|e| format!("syncing {}: {e}", wal.display()));
        if let Some(why) = &failed {
            events::StoreWriteFailed { what: "sync", error: why }.emit();
        }
        for settle in settles {
            settle(failed.as_deref());
        }
    }
}

/// Runs a write, a panic in it an error of its own rather than the writer's end.
fn guarded(conn: &Conn, run: Run) -> (bool, Settle) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(Ok(conn)))) {
        Ok(r) => r,
        // The closure is gone with its sender: its caller is told the store closed for this call.
        Err(_) => {
            events::StoreWriteFailed { what: "write", error: "the write panicked" }.emit();
            (false, Box::new(|_| {}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(name: &str) -> (Threads, PathBuf) {
        let dir = std::env::temp_dir().join(format!("hangar-store-threads-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER UNIQUE)").unwrap();
        (Threads::start(conn, &path, || {}).unwrap(), dir)
    }

    async fn count(t: &Threads) -> i64 {
        t.read(|c| Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?)).await.unwrap()
    }

    /// Writes sent together commit together, each answered once its batch committed; a failing
    /// write in the batch undoes only its own rows and gets its own error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_commits_together_and_a_failed_write_undoes_only_itself() {
        let (t, dir) = threads("batch");
        let t = Arc::new(t);
        let writes: Vec<_> = (0..200)
            .map(|i| {
                let t = t.clone();
                tokio::spawn(async move {
                    t.write(Durability::Replayable, move |c| {
                        c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
                        // Every tenth inserts a second row, then a duplicate: its first row must go too.
                        if i % 10 == 0 {
                            c.execute("INSERT INTO t (v) VALUES (?1)", [1000 + i])?;
                            c.execute("INSERT INTO t (v) VALUES (?1)", [1000 + i])?;
                        }
                        Ok(i)
                    })
                    .await
                })
            })
            .collect();
        let mut failed = 0;
        for w in writes {
            match w.await.unwrap() {
                Ok(_) => {}
                Err(StoreError::Sqlite(_)) => failed += 1,
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(failed, 20);
        assert_eq!(count(&t).await, 180, "the failed writes left no row, the others all of theirs");
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The WAL reaches the database file with no checkpoint asked for, while the writer stays
    /// below the pages at which it would checkpoint itself: the checkpointer thread did it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checkpointer_moves_the_wal_into_the_database_file() {
        let (t, dir) = threads("checkpoint");
        let db = dir.join("t.sqlite");
        t.write(Durability::Durable, |c| Ok(c.execute_batch("CREATE TABLE b (x BLOB)")?)).await.unwrap();
        let before = std::fs::metadata(&db).unwrap().len();
        // 300 commits of four and more pages: past CHECKPOINT_PAGES, far below the writer's own.
        for _ in 0..300 {
            t.write(Durability::Replayable, |c| Ok(c.execute("INSERT INTO b VALUES (zeroblob(16384))", [])?))
                .await
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let moved = 4 * 1024 * 1024;
        while std::fs::metadata(&db).unwrap().len() < before + moved && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let after = std::fs::metadata(&db).unwrap().len();
        assert!(after >= before + moved, "the database file grew from {before} to {after} bytes only");
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The durable writes committed while a sync ran are answered by one more sync, and a sync
    /// that fails is the error of every write it was for (committed, not known to be on disk).
    #[test]
    fn the_syncer_answers_every_durable_write_with_its_sync() {
        let (tx, rx) = mpsc::channel::<Vec<Settle>>();
        let (answers, answered) = mpsc::channel::<Option<String>>();
        for _ in 0..3 {
            let a = answers.clone();
            tx.send(vec![Box::new(move |failed: Option<&str>| a.send(failed.map(str::to_owned)).unwrap())]).unwrap();
        }
        drop(tx);
        syncs(PathBuf::from("/nonexistent/hangar-test-wal"), rx);
        drop(answers);
        let got: Vec<_> = answered.iter().collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got.iter().all(|a| a.as_deref().is_some_and(|w| w.starts_with("syncing /nonexistent"))), "{got:?}");
    }

    /// A write that panics is an error for its caller; the writer goes on.
    #[tokio::test]
    async fn a_panicking_write_does_not_end_the_writer() {
        let (t, dir) = threads("panic");
        let r = t.write(Durability::Durable, |_| -> Result<()> { panic!("a bug in a write") }).await;
        assert!(matches!(r, Err(StoreError::Closed)), "{r:?}");
        t.write(Durability::Durable, |c| Ok(c.execute("INSERT INTO t (v) VALUES (1)", [])?)).await.unwrap();
        assert_eq!(count(&t).await, 1);
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A connection used off the store's threads (here: the test's own, a runtime's) panics in a
    /// debug build: the check that keeps SQLite off the runtime's workers.
    #[test]
    #[cfg(debug_assertions)]
    fn a_connection_used_off_the_store_threads_panics() {
        let (t, dir) = threads("off");
        let conn = open_reader(t.path()).unwrap();
        let used = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0));
        }));
        assert!(used.is_err(), "a connection was usable on a thread that is not the store's");
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
