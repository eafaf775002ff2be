"""Helpers shared by the end-to-end tests (process inspection, output collection).

The daemon runs on this machine, so the tests look at its children directly in /proc.
"""

import os
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return bool(pred())
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the parenthesised command name, which may itself hold spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def wait_exec(pid: int, name: str, timeout: float = 10) -> bool:
    """Wait until ``pid`` runs the program ``name`` (e.g. bash has exec'd `sleep`).

    Tests kill a command only once its login shell is past its profile: a `bash -l`
    killed in the middle of its profile may leave the profile's lock files behind."""
    return wait_until(lambda: comm(pid) == name, timeout)


def pids_with_cmdline(needle: str) -> List[int]:
    """Live pids whose full command line (args joined by spaces) is exactly ``needle``.
    Zombies have an empty cmdline, so they never match."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        if cmdline == needle and pid_alive(int(entry)):
            found.append(int(entry))
    return found


class Collector:
    """Runs a sync ``CommandHandle.wait`` in a thread and collects what its callbacks get,
    so a test can send input and watch output while the command runs."""

    def __init__(self, handle):
        self.handle = handle
        self.events: List[tuple] = []  # ("stdout" | "stderr" | "pty", str | bytes)
        self.result = None
        self.exception: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _add(self, kind, data):
        with self._lock:
            self.events.append((kind, data))

    def _run(self):
        try:
            self.result = self.handle.wait(
                on_stdout=lambda s: self._add("stdout", s),
                on_stderr=lambda s: self._add("stderr", s),
                on_pty=lambda b: self._add("pty", b),
            )
        except BaseException as e:  # handed to the test through .exception
            self.exception = e

    def text(self, kind: str = "stdout") -> str:
        with self._lock:
            parts = [d for k, d in self.events if k == kind]
        if kind == "pty":
            return b"".join(parts).decode("utf-8", "replace")
        return "".join(parts)

    def wait_for(self, needle: str, kind: str = "stdout", timeout: float = 10) -> bool:
        return wait_until(lambda: needle in self.text(kind), timeout)

    def join(self, timeout: float = 15) -> bool:
        """Wait for ``handle.wait`` to return or raise; False if it is still running."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
