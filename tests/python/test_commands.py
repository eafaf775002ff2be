"""`sandbox.commands.run` in the foreground, sync SDK."""

import os
import pwd
import time

import pytest
from e2b import CommandExitException, InvalidArgumentException, TimeoutException

from e2e_util import pid_alive, wait_exec, wait_until


def test_run_stdout_stderr_exit_zero(sandbox):
    r = sandbox.commands.run("echo hello; echo oops >&2")
    assert r.exit_code == 0
    assert r.stdout == "hello\n"
    assert r.stderr == "oops\n"
    assert not r.error


def test_run_nonzero_exit_raises_command_exit_exception(sandbox):
    with pytest.raises(CommandExitException) as info:
        sandbox.commands.run("echo partial; echo bad >&2; exit 3")
    e = info.value
    assert e.exit_code == 3
    assert e.stdout == "partial\n"
    assert e.stderr == "bad\n"


@pytest.mark.parametrize("code", [1, 42, 255])
def test_run_exit_codes(sandbox, code):
    with pytest.raises(CommandExitException) as info:
        sandbox.commands.run(f"exit {code}")
    assert info.value.exit_code == code


def test_callbacks_receive_chunks_in_order(sandbox):
    events = []
    cmd = (
        "for i in 1 2 3; do echo out$i; sleep 0.2; echo err$i >&2; sleep 0.2; done; "
        "echo done"
    )
    r = sandbox.commands.run(
        cmd,
        on_stdout=lambda s: events.append(("out", s)),
        on_stderr=lambda s: events.append(("err", s)),
    )
    assert r.exit_code == 0
    assert r.stdout == "out1\nout2\nout3\ndone\n"
    assert r.stderr == "err1\nerr2\nerr3\n"
    # Each write is 200 ms apart, so each arrives as its own chunk, in write order.
    assert events == [
        ("out", "out1\n"), ("err", "err1\n"),
        ("out", "out2\n"), ("err", "err2\n"),
        ("out", "out3\n"), ("err", "err3\n"),
        ("out", "done\n"),
    ]
    # The callbacks saw exactly what the result accumulated.
    assert "".join(s for k, s in events if k == "out") == r.stdout
    assert "".join(s for k, s in events if k == "err") == r.stderr


def test_envs_are_passed(sandbox):
    r = sandbox.commands.run(
        'printf "%s|%s" "$HANGAR_E2E_VAR" "$HANGAR_E2E_OTHER"',
        envs={"HANGAR_E2E_VAR": "hello world", "HANGAR_E2E_OTHER": "a=b;c"},
    )
    assert r.stdout == "hello world|a=b;c"


def test_env_has_user_home_and_path(sandbox):
    me = pwd.getpwnam("user")
    r = sandbox.commands.run('printf "%s|%s|%s" "$USER" "$HOME" "$PATH"')
    user, home, path = r.stdout.split("|")
    assert user == me.pw_name
    assert home == me.pw_dir
    assert "/usr/bin" in path.split(":") or "/bin" in path.split(":")


def test_cwd_is_honoured(sandbox, tmp_path):
    d = tmp_path / "work dir"
    d.mkdir()
    (d / "marker-file").write_text("x")
    r = sandbox.commands.run("pwd; ls", cwd=str(d))
    assert r.stdout == f"{os.path.realpath(d)}\nmarker-file\n"


def test_default_cwd_is_users_home(sandbox):
    r = sandbox.commands.run("pwd")
    assert r.stdout == pwd.getpwnam("user").pw_dir + "\n"


def test_missing_cwd_is_invalid_argument(sandbox):
    with pytest.raises(InvalidArgumentException):
        sandbox.commands.run("pwd", cwd="/nonexistent/hangar-e2e-missing-dir")


def test_stdin_false_gives_devnull(sandbox):
    # run() sends stdin=false: `cat` must see EOF at once rather than wait on a pipe.
    t0 = time.monotonic()
    r = sandbox.commands.run("cat; echo cat-done", timeout=20)
    assert r.stdout == "cat-done\n"
    assert time.monotonic() - t0 < 10


def test_timeout_kills_command(sandbox, tmp_path, kill_after):
    pidfile = tmp_path / "pids"
    # $$ is the bash the daemon started; $! its `sleep` child.
    cmd = f"sleep 30 & echo $$ $! > {pidfile}; wait"
    t0 = time.monotonic()
    # The client's deadline and the daemon's kill at Connect-Timeout-Ms race: either the
    # SDK's TimeoutException or the killed command's nonzero end event may win.
    with pytest.raises((TimeoutException, CommandExitException)) as info:
        sandbox.commands.run(cmd, timeout=1)
    if isinstance(info.value, CommandExitException):
        assert info.value.exit_code != 0
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"timeout=1 took {elapsed:.1f}s"

    assert wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 5)
    bash_pid, sleep_pid = (int(p) for p in pidfile.read_text().split())
    kill_after(bash_pid)
    kill_after(sleep_pid)
    # Connect-Timeout-Ms bounds the process's life: the daemon kills it (and, in
    # hangar, its process group) when the deadline passes.
    assert wait_until(lambda: not pid_alive(bash_pid), 5), "command outlived its timeout"
    assert wait_until(lambda: not pid_alive(sleep_pid), 5), "command's child outlived its timeout"


def test_utf8_split_across_writes(sandbox):
    # Each multibyte character is written in pieces, 300 ms apart, so the daemon reads
    # (and sends) the pieces as separate data events; the SDK's incremental decoder must
    # join them.
    cmd = (
        r"printf '\xe2'; sleep 0.3; printf '\x82\xac'; sleep 0.3; "
        r"printf '\xf0\x9f'; sleep 0.3; printf '\x98\x80'; sleep 0.3; "
        r"printf 'a\xc3'; sleep 0.3; printf '\xa9\n'"
    )
    chunks = []
    r = sandbox.commands.run(cmd, on_stdout=chunks.append)
    assert r.stdout == "€😀aé\n"
    assert "\ufffd" not in r.stdout
    assert "".join(chunks) == r.stdout


def test_utf8_long_run(sandbox):
    # 200000 three-byte characters: pipe reads end at arbitrary byte offsets.
    n = 200_000
    chunks = []
    r = sandbox.commands.run(
        f"yes '€' | tr -d '\\n' | head -c {3 * n}; printf 'é%.0s' $(seq 1 1000)",
        on_stdout=chunks.append,
    )
    assert "\ufffd" not in r.stdout
    assert r.stdout == "€" * n + "é" * 1000
    assert "".join(chunks) == r.stdout


def test_large_output_is_complete(sandbox):
    n = 3_000_000
    r = sandbox.commands.run(f"head -c {n} /dev/zero | tr '\\0' 'a'; echo; echo end >&2")
    assert len(r.stdout) == n + 1
    assert r.stdout == "a" * n + "\n"
    assert r.stderr == "end\n"


def test_is_running_uses_health(sandbox):
    # GET /health must answer 204 (or any 2xx) for the SDK to say the sandbox runs.
    assert sandbox.is_running() is True


def test_fresh_daemon_via_explicit_sandbox_url(fresh_envd, envd):
    from e2b import Sandbox

    d = fresh_envd()
    assert d.url != envd.url
    sbx = Sandbox.create(debug=True, sandbox_url=d.url)
    assert sbx.envd_api_url == d.url
    assert sbx.commands.run("echo $$").exit_code == 0
    listed = [p.pid for p in sbx.commands.list()]
    h = sbx.commands.run("sleep 100", background=True)
    assert wait_exec(h.pid, "sleep")
    try:
        # The new process is the fresh daemon's, not the session daemon's.
        assert h.pid in [p.pid for p in sbx.commands.list()]
        assert h.pid not in listed
    finally:
        assert sbx.commands.kill(h.pid) is True


def test_stdout_complete_when_stderr_interleaves(sandbox):
    # Big stdout with small stderr writes between its 64 KiB pieces: no byte of either
    # stream may be lost or duplicated on the Start stream. Repeated, because a race
    # between the two pipe readers shows only sometimes.
    n, k = 65536, 60
    cmd = f"for i in $(seq {k}); do head -c {n} /dev/zero | tr '\\0' a; printf xyz >&2; done; echo"
    for attempt in range(8):
        r = sandbox.commands.run(cmd)
        assert (attempt, len(r.stdout), len(r.stderr)) == (attempt, n * k + 1, 3 * k)
        assert r.stdout == "a" * (n * k) + "\n"
        assert r.stderr == "xyz" * k
