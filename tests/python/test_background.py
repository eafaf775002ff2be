"""Background commands: handles, list, connect, send_stdin, kill (sync SDK)."""

import time
import uuid

import pytest
from e2b import CommandExitException, NotFoundException

from e2e_util import Collector, pid_alive, pids_with_cmdline, wait_exec, wait_until

UNKNOWN_PID = 2_000_000_000  # above any Linux pid_max


def test_background_handle_pid_and_list(sandbox, tmp_path, kill_after):
    marker = uuid.uuid4().hex
    cmd = f"sleep 1000 # {marker}"
    h = sandbox.commands.run(cmd, background=True, envs={"HANGAR_E2E": marker}, cwd=str(tmp_path))
    kill_after(h.pid)
    assert isinstance(h.pid, int) and h.pid > 0
    assert wait_exec(h.pid, "sleep")

    procs = {p.pid: p for p in sandbox.commands.list()}
    assert h.pid in procs, f"pid {h.pid} not in {sorted(procs)}"
    p = procs[h.pid]
    assert p.cmd == "/bin/bash"
    assert p.args == ["-l", "-c", cmd]
    assert p.tag is None
    assert p.envs.get("HANGAR_E2E") == marker
    assert p.cwd == str(tmp_path)

    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as info:
        h.wait()
    assert info.value.exit_code != 0
    assert wait_until(lambda: not pid_alive(h.pid), 5)


def test_background_wait_returns_result(sandbox):
    h = sandbox.commands.run("echo a; sleep 0.5; echo b >&2; sleep 0.2; echo c", background=True)
    r = h.wait()
    assert r.exit_code == 0
    assert r.stdout == "a\nc\n"
    assert r.stderr == "b\n"


def test_connect_receives_further_output(sandbox, tmp_path, kill_after):
    go = tmp_path / "go"
    cmd = f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; echo after-connect; exit 7"
    h = sandbox.commands.run(cmd, background=True)
    kill_after(h.pid)
    # Disconnecting stops this client's stream; it must not kill the process.
    h.disconnect()
    assert wait_until(lambda: pid_alive(h.pid), 2)

    h2 = sandbox.commands.connect(h.pid)
    assert h2.pid == h.pid
    go.touch()
    with pytest.raises(CommandExitException) as info:
        h2.wait()
    assert info.value.exit_code == 7
    assert "after-connect\n" in info.value.stdout


def test_connect_unknown_pid_is_not_found(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.commands.connect(UNKNOWN_PID)


def test_send_stdin_is_echoed_by_cat(sandbox, kill_after):
    h = sandbox.commands.run("cat", background=True, stdin=True)
    kill_after(h.pid)
    out = Collector(h)
    sandbox.commands.send_stdin(h.pid, "hello\n")
    assert out.wait_for("hello\n"), f"no echo; got {out.text()!r}"
    h.send_stdin(b"bytes too \xc3\xa9\n")
    assert out.wait_for("bytes too é\n"), f"no echo; got {out.text()!r}"
    # EOF on stdin ends `cat` normally.
    sandbox.commands.close_stdin(h.pid)
    assert out.join(10), "cat did not end after close_stdin"
    assert out.exception is None, repr(out.exception)
    assert out.result.exit_code == 0
    assert out.result.stdout == "hello\nbytes too é\n"


def test_kill_returns_true_and_process_ends(sandbox, kill_after):
    h = sandbox.commands.run("sleep 1000", background=True)
    kill_after(h.pid)
    out = Collector(h)
    assert wait_exec(h.pid, "sleep")
    assert sandbox.commands.kill(h.pid) is True
    assert out.join(10), "the Start stream did not end after kill"
    assert isinstance(out.exception, CommandExitException), repr(out.exception)
    assert out.exception.exit_code != 0
    assert wait_until(lambda: not pid_alive(h.pid), 5)


def test_kill_unknown_pid_returns_false(sandbox):
    assert sandbox.commands.kill(UNKNOWN_PID) is False


def test_kill_reaches_the_whole_process_group(sandbox, kill_after):
    # hangar signals the process group, so a shell's background children die too.
    secs = f"1000.{uuid.uuid4().int % 10**6:06d}"
    h = sandbox.commands.run(f"bash -c 'sleep {secs} & sleep {secs}'", background=True)
    kill_after(h.pid)
    needle = f"sleep {secs}"
    assert wait_until(lambda: len(pids_with_cmdline(needle)) == 2, 5), pids_with_cmdline(needle)
    for pid in pids_with_cmdline(needle):
        kill_after(pid)
    assert sandbox.commands.kill(h.pid) is True
    assert wait_until(lambda: not pids_with_cmdline(needle), 5), (
        f"still alive after kill: {pids_with_cmdline(needle)}"
    )
    with pytest.raises(CommandExitException):
        h.wait()



@pytest.mark.parametrize("stderr_bytes", [18, 65536])
def test_unread_start_stream_loses_no_output(sandbox, kill_after, tmp_path, stderr_bytes):
    # Nobody reads the Start stream for a while: the daemon must hold the process back
    # (backpressure) rather than drop output. While stdout is stalled, stderr gets one
    # write (its pipe reader sat idle, not stalled) which must not push unread stdout
    # out of the daemon's buffer either: the E2B stream has no way to report a gap.
    n = 8_000_000
    err_file = tmp_path / "stderr-payload"
    err_file.write_bytes(b"e" * stderr_bytes)
    cmd = (
        f"head -c {n} /dev/zero | tr '\\0' a & "
        f"sleep 2; dd if={err_file} bs={stderr_bytes} count=1 status=none >&2; "
        "wait; echo; echo tail"
    )
    h = sandbox.commands.run(cmd, background=True)
    kill_after(h.pid)
    time.sleep(3.5)  # the producer is stalled on a full pipe by now; stderr was written
    r = h.wait()
    assert r.stderr == "e" * stderr_bytes
    assert len(r.stdout) == n + len("\ntail\n"), f"{n + 6 - len(r.stdout)} stdout bytes lost"
    assert r.stdout == "a" * n + "\ntail\n"
