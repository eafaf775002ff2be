//! Writing request files and waiting for answer files.
use std::{
    fs::{DirBuilder, OpenOptions},
    io::{Read as _, Write as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hangar_agents::inbox::{request_file_name, Answer, Request, MAX_FILE_BYTES};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::AgentError;

/// How often the answers directory is looked at.
const POLL: Duration = Duration::from_millis(100);

/// A request id nobody can guess: 16 random bytes in hex.
pub(super) fn new_id() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Never expected; still unique enough for one inbox (time and pid), if guessable.
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        return format!("{:x}-{:x}", t.as_nanos(), std::process::id());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Epoch seconds, for `created_at`.
pub(super) fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A request file this command wrote; removed when dropped, so that every exit after writing
/// (an answer, an error, a timeout, SIGTERM) takes it away.
pub(super) struct Written {
    pub path: PathBuf,
}

impl Drop for Written {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `req` into `inbox` atomically: `.<id>.tmp` (mode 0600, never an existing file), then
/// renamed to its name, so the relay never reads half a request. Makes `inbox` (0700) if needed.
pub(super) fn write(inbox: &Path, req: &Request) -> Result<PathBuf, AgentError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AgentError::Write { path, source }
    };
    DirBuilder::new().recursive(true).mode(0o700).create(inbox).map_err(failed(inbox))?;
    let tmp = inbox.join(format!(".{}.tmp", req.id));
    let path = inbox.join(request_file_name(req));
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(format!("{}\n", req.to_json()).as_bytes()))
        .map_err(failed(&tmp))
        .and_then(|()| std::fs::rename(&tmp, &path).map_err(failed(&path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

/// Waits for `<answers>/<id>.json` holding a valid answer to `id`, until `timeout` (if any) or a
/// SIGTERM, SIGINT or SIGHUP. A file that does not parse, or answers another id, is skipped: it
/// may be half-written, and it is not this request's answer. The caller has called
/// [`catch_stop_signals`] before writing the request.
pub(super) fn wait(answers: &Path, id: &str, timeout: Option<Duration>) -> Result<Answer, AgentError> {
    let path = answers.join(format!("{id}.json"));
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        if let Some(answer) = read_answer(&path)?.filter(|a| a.id == id) {
            return Ok(answer);
        }
        if STOP.load(Ordering::Relaxed) {
            return Err(AgentError::Interrupted);
        }
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AgentError::Timeout(timeout.unwrap_or_default()));
            }
            std::thread::sleep(POLL.min(left));
        } else {
            std::thread::sleep(POLL);
        }
    }
}

/// The answer in `path`, `None` while there is none that parses.
fn read_answer(path: &Path) -> Result<Option<Answer>, AgentError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(AgentError::Read { path: path.to_path_buf(), source }),
    };
    let mut bytes = Vec::new();
    // One byte over the limit is enough for Answer::parse to refuse it.
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AgentError::Read { path: path.to_path_buf(), source })?;
    Ok(Answer::parse(&bytes).ok())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe. The wait loop sees it within a poll.
    STOP.store(true, Ordering::Relaxed);
}

/// A stop signal ends the wait through the ordinary return path, so the request file is removed
/// and `approve` still prints its deny decision.
pub(super) fn catch_stop_signals() {
    let action = SigAction::new(SigHandler::Handler(on_stop_signal), SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { sigaction(signal, &action) };
    }
}
