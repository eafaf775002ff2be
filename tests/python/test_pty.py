"""`sandbox.pty`: create with a size, input, resize, kill (sync SDK)."""

import pytest
from e2b import CommandExitException, PtySize, SandboxException

from e2e_util import Collector, pid_alive, wait_until


def test_pty_size_input_resize_and_exit(sandbox, kill_after):
    h = sandbox.pty.create(PtySize(rows=17, cols=93))
    kill_after(h.pid)
    out = Collector(h)

    sandbox.pty.send_stdin(h.pid, b"stty size\n")
    assert out.wait_for("17 93", kind="pty"), f"pty output: {out.text('pty')!r}"

    sandbox.pty.resize(h.pid, PtySize(rows=31, cols=121))
    sandbox.pty.send_stdin(h.pid, b"stty size\n")
    assert out.wait_for("31 121", kind="pty"), f"pty output: {out.text('pty')!r}"

    sandbox.pty.send_stdin(h.pid, b"exit 0\n")
    assert out.join(10), "the PTY stream did not end after `exit`"
    assert out.exception is None, repr(out.exception)
    assert out.result.exit_code == 0
    assert wait_until(lambda: not pid_alive(h.pid), 5)


def test_pty_env_and_echo(sandbox, kill_after):
    h = sandbox.pty.create(PtySize(rows=24, cols=80), envs={"HANGAR_PTY_VAR": "pty-ok"})
    kill_after(h.pid)
    out = Collector(h)
    # The SDK sends TERM=xterm-256color (and LANG/LC_ALL=C.UTF-8); ours is added to it.
    sandbox.pty.send_stdin(h.pid, b'echo "T=$TERM V=$HANGAR_PTY_VAR L=$LC_ALL"\n')
    assert out.wait_for("T=xterm-256color V=pty-ok L=C.UTF-8", kind="pty"), out.text("pty")
    # A PTY is a terminal: stdin/stdout are ttys inside it.
    sandbox.pty.send_stdin(h.pid, b"[ -t 0 ] && [ -t 1 ] && echo IS-A-TTY\n")
    assert out.wait_for("IS-A-TTY\r\n", kind="pty"), out.text("pty")
    sandbox.pty.send_stdin(h.pid, b"exit 5\n")
    assert out.join(10)
    assert isinstance(out.exception, CommandExitException), repr(out.exception)
    assert out.exception.exit_code == 5


def test_pty_kill(sandbox, kill_after):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    kill_after(h.pid)
    out = Collector(h)
    sandbox.pty.send_stdin(h.pid, b"echo READY-$((6*7))\n")
    assert out.wait_for("READY-42", kind="pty"), out.text("pty")
    assert sandbox.pty.kill(h.pid) is True
    assert out.join(10), "the PTY stream did not end after kill"
    assert isinstance(out.exception, CommandExitException), repr(out.exception)
    assert wait_until(lambda: not pid_alive(h.pid), 5)
    assert sandbox.pty.kill(h.pid) in (False, True)  # a second kill must not raise


def test_pty_listed_and_stdin_is_refused_for_pty(sandbox, kill_after):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    kill_after(h.pid)
    out = Collector(h)
    sandbox.pty.send_stdin(h.pid, b"echo READY-$((6*7))\n")
    assert out.wait_for("READY-42", kind="pty"), out.text("pty")
    try:
        listed = {p.pid: p for p in sandbox.commands.list()}
        assert h.pid in listed
        assert listed[h.pid].cmd == "/bin/bash"
        assert listed[h.pid].args == ["-i", "-l"]
        # Plain stdin to a PTY process is an error (failed_precondition in hangar).
        with pytest.raises(SandboxException):
            sandbox.commands.send_stdin(h.pid, "x")
    finally:
        assert sandbox.pty.kill(h.pid) is True
    assert out.join(10)
