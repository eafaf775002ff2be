"""The same wire paths through `AsyncSandbox` (each test runs its own event loop)."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, TimeoutException

from e2e_util import pid_alive, wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _sandbox(envd):
    sbx = await AsyncSandbox.create()
    assert sbx.sandbox_id == "debug_sandbox_id"
    assert sbx.envd_api_url == envd.url
    return sbx


def test_async_run_output_and_exit_codes(envd):
    async def main():
        sbx = await _sandbox(envd)
        r = await sbx.commands.run("echo hello; echo oops >&2", envs={"X": "y"})
        assert (r.exit_code, r.stdout, r.stderr) == (0, "hello\n", "oops\n")

        r = await sbx.commands.run('printf "%s" "$X"; pwd', envs={"X": "y z"}, cwd="/tmp")
        assert r.stdout == "y z/tmp\n"

        with pytest.raises(CommandExitException) as info:
            await sbx.commands.run("echo bad >&2; exit 4")
        assert info.value.exit_code == 4
        assert info.value.stderr == "bad\n"

    run(main())


def test_async_callbacks_and_utf8(envd):
    async def main():
        sbx = await _sandbox(envd)
        got = []

        async def on_out(s):
            got.append(s)

        cmd = r"printf '\xe2'; sleep 0.3; printf '\x82\xac'; sleep 0.3; printf '\xf0\x9f\x98'; sleep 0.3; printf '\x80\n'"
        r = await sbx.commands.run(cmd, on_stdout=on_out)
        assert r.stdout == "€😀\n"
        assert "".join(got) == r.stdout

    run(main())


def test_async_timeout(envd):
    async def main():
        sbx = await _sandbox(envd)
        t0 = asyncio.get_running_loop().time()
        # The client's deadline and the daemon's kill at Connect-Timeout-Ms race: either
        # the SDK's TimeoutException or the killed command's nonzero end event may win.
        with pytest.raises((TimeoutException, CommandExitException)) as info:
            await sbx.commands.run("sleep 30", timeout=1)
        if isinstance(info.value, CommandExitException):
            assert info.value.exit_code != 0
        assert asyncio.get_running_loop().time() - t0 < 10

    run(main())


def test_async_background_stdin_list_connect_kill(envd, kill_after):
    async def main():
        sbx = await _sandbox(envd)
        seen = []
        h = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=seen.append)
        kill_after(h.pid)
        assert h.pid > 0
        assert h.pid in [p.pid for p in await sbx.commands.list()]

        await sbx.commands.send_stdin(h.pid, "ping\n")
        for _ in range(200):
            if "".join(seen) == "ping\n":
                break
            await asyncio.sleep(0.05)
        assert "".join(seen) == "ping\n"

        # A second subscriber sees output produced after it attached.
        seen2 = []
        h2 = await sbx.commands.connect(h.pid, on_stdout=seen2.append)
        assert h2.pid == h.pid
        await h.send_stdin("pong\n")
        for _ in range(200):
            if "pong\n" in "".join(seen2) and "".join(seen) == "ping\npong\n":
                break
            await asyncio.sleep(0.05)
        assert "pong\n" in "".join(seen2)
        assert "".join(seen) == "ping\npong\n"

        assert await sbx.commands.kill(h.pid) is True
        with pytest.raises(CommandExitException):
            await h.wait()
        with pytest.raises(CommandExitException):
            await h2.wait()
        assert await sbx.commands.kill(2_000_000_000) is False

    run(main())


def test_async_background_wait(envd):
    async def main():
        sbx = await _sandbox(envd)
        h = await sbx.commands.run("sleep 0.3; echo done", background=True)
        r = await h.wait()
        assert (r.exit_code, r.stdout) == (0, "done\n")
        assert wait_until(lambda: not pid_alive(h.pid), 5)

    run(main())


def test_async_pty(envd, kill_after):
    async def main():
        sbx = await _sandbox(envd)
        data = bytearray()
        h = await sbx.pty.create(PtySize(rows=13, cols=57), on_data=data.extend)
        kill_after(h.pid)
        await sbx.pty.send_stdin(h.pid, b"stty size\n")
        for _ in range(200):
            if b"13 57" in data:
                break
            await asyncio.sleep(0.05)
        assert b"13 57" in data, bytes(data)
        await sbx.pty.resize(h.pid, PtySize(rows=20, cols=70))
        await sbx.pty.send_stdin(h.pid, b"stty size\n")
        for _ in range(200):
            if b"20 70" in data:
                break
            await asyncio.sleep(0.05)
        assert b"20 70" in data, bytes(data)
        assert await sbx.pty.kill(h.pid) is True
        with pytest.raises(CommandExitException):
            await h.wait()

    run(main())
