"""Fixtures: the real hangar-envd binary, driven by the unmodified e2b SDK in debug mode.

In debug mode (E2B_DEBUG=true) the SDK never calls E2B's API: `Sandbox.create()` names the
sandbox `debug_sandbox_id`, assumes envd 99.99.99 and talks to E2B_SANDBOX_URL directly.

The daemon runs as root (as in a sandbox image) with `--default-user user`, as E2B templates
run commands as `user`: every `commands.run` is a `bash -l` login shell, and a test user's clean
profile keeps the host's own root profile out of the tests.
"""

import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "hangar-envd"
LISTEN_RE = re.compile(r"^hangar-envd listening on (http://[0-9.:\[\]a-fA-F]+:\d+)\s*$")
START_TIMEOUT = 30.0


def envd_binary() -> Path:
    path = Path(os.environ.get("HANGAR_ENVD_BIN") or DEFAULT_BIN)
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"hangar-envd binary not found at {path}: build it with "
            f"`cargo build -p hangar-envd` in {REPO_ROOT} or set HANGAR_ENVD_BIN",
            pytrace=False,
        )
    return path


class Daemon:
    """One running hangar-envd process."""

    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path):
        self.proc = proc
        self.url = url
        self.log_path = log_path

    def log(self, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


_live_daemons: List[Daemon] = []


DEFAULT_USER = "user"


def ensure_default_user() -> pwd.struct_passwd:
    """E2B templates run commands as `user`; make sure that Unix user exists."""
    if os.geteuid() != 0:
        pytest.fail(
            "these tests run the daemon as root acting as `user`, as in an E2B sandbox; "
            "run them as root (CI does)",
            pytrace=False,
        )
    try:
        return pwd.getpwnam(DEFAULT_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", DEFAULT_USER], check=True)
        return pwd.getpwnam(DEFAULT_USER)


def start_daemon(*extra_args: str, log_dir: Optional[Path] = None) -> Daemon:
    """Start hangar-envd on a free loopback port and wait for its `listening` line.
    Unless `extra_args` name one, the default user is `user`."""
    binary = envd_binary()
    if "--default-user" not in extra_args:
        ensure_default_user()
        extra_args = ("--default-user", DEFAULT_USER, *extra_args)
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="hangar-envd-e2e-"))
    log_path = log_dir / f"hangar-envd-{len(_live_daemons)}-{os.getpid()}.stderr.log"
    log_file = open(log_path, "wb")
    proc = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1", "--port", "0", *extra_args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log_file,
        env={**os.environ, "RUST_BACKTRACE": "1"},
    )
    log_file.close()

    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def pump():
        # Reads every stdout line (so the pipe never fills), handing them to the starter.
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", "replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()

    try:
        first = lines.get(timeout=START_TIMEOUT)
    except queue.Empty:
        first = "<nothing within %ss>" % START_TIMEOUT
    m = LISTEN_RE.match(first or "")
    if not m:
        proc.kill()
        proc.wait(10)
        stderr = log_path.read_text(errors="replace")[-4000:]
        pytest.fail(
            f"hangar-envd did not print `hangar-envd listening on http://IP:PORT` as its "
            f"first stdout line; got {first!r}; exit code {proc.returncode}; stderr:\n{stderr}",
            pytrace=False,
        )
    daemon = Daemon(proc, m.group(1), log_path)
    _live_daemons.append(daemon)
    return daemon


@pytest.fixture(scope="session")
def envd(tmp_path_factory):
    """The session's daemon; E2B_DEBUG / E2B_SANDBOX_URL point the SDK at it."""
    daemon = start_daemon(log_dir=tmp_path_factory.mktemp("envd"))
    saved = {k: os.environ.get(k) for k in ("E2B_DEBUG", "E2B_SANDBOX_URL")}
    os.environ["E2B_DEBUG"] = "true"
    os.environ["E2B_SANDBOX_URL"] = daemon.url
    yield daemon
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    daemon.stop()
    _live_daemons.remove(daemon)


@pytest.fixture
def fresh_envd(tmp_path):
    """Factory for a test that needs its own daemon: `fresh_envd(*extra_args)`.
    Point a sandbox at it with `Sandbox.create(debug=True, sandbox_url=daemon.url)`."""
    started: List[Daemon] = []

    def start(*extra_args: str) -> Daemon:
        d = start_daemon(*extra_args, log_dir=tmp_path)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
        _live_daemons.remove(d)


@pytest.fixture
def sandbox(envd):
    from e2b import Sandbox

    sbx = Sandbox.create()
    assert sbx.sandbox_id == "debug_sandbox_id"
    assert sbx.envd_api_url == envd.url
    return sbx


@pytest.fixture
def kill_after(envd):
    """Register pids a test started; whatever is still alive at teardown gets SIGKILL
    (to its process group, then to the pid) so one failed test leaves no stray process."""
    pids: List[int] = []
    yield pids.append
    for pid in pids:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture(scope="session")
def require_root():
    if os.geteuid() != 0:
        pytest.fail(
            "these tests switch Unix users and must run as root (CI runs as root)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def e2b_user(require_root):
    """The Unix user the daemons act as by default (`--default-user user`)."""
    return ensure_default_user()


@pytest.fixture
def tmp_path(e2b_user):
    """A fresh directory the sandbox's processes (running as `user`) can use: pytest's own
    tmp_path lives under a root-only directory."""
    d = Path(tempfile.mkdtemp(prefix="hangar-e2e-", dir="/tmp"))
    os.chown(d, e2b_user.pw_uid, e2b_user.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _envd_log_offsets(request):
    request.node._envd_log_offsets = {id(d): d.log_size() for d in _live_daemons}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    offsets = getattr(item, "_envd_log_offsets", {})
    for d in _live_daemons:
        text = d.log(offsets.get(id(d), 0))
        if len(text) > 8000:
            text = "...\n" + text[-8000:]
        alive = "running" if d.proc.poll() is None else f"exited {d.proc.returncode}"
        report.sections.append(
            (f"hangar-envd {d.url} ({alive}) stderr during this test", text or "<empty>")
        )
