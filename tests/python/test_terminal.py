"""A terminal in a sandbox as a person uses it: from the console (xterm.js in a real headless
Chromium, under the console's Content-Security-Policy, over the relay's WebSocket) and from the
CLI (`hangar exec -it`, driven through a real PTY: raw mode, input, output, the exit code, and
the terminal's settings put back as they were).
"""

import fcntl
import os
import select
import struct
import subprocess
import termios
import time

from test_console import browser, css, relay, sign_in, wait  # noqa: F401 (fixtures)
from test_mcp import ADMIN, relay_binary


def rows(driver):
    """The terminal's rendered rows as its screen-reader tree holds them (xterm draws on a canvas)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.terminal-panel .xterm-accessibility-tree > div')].map((e) => e.textContent)"
    )


def test_the_console_opens_a_terminal_types_a_command_and_reads_its_output(relay, browser):  # noqa: F811
    sign_in(browser, relay)
    browser.get(f"{relay.url}/#/unit/default")
    wait(browser, lambda d: css(d, "button.open-terminal"))[0].click()
    wait(browser, lambda d: css(d, ".terminal-panel[data-state=open]"))
    screen = wait(browser, lambda d: css(d, ".terminal-panel .xterm-helper-textarea"))[0]
    screen.send_keys("echo hello-$((6*7))\n")
    # The typed line says `$((6*7))`; only the shell's output says 42.
    wait(browser, lambda d: any(r.strip() == "hello-42" for r in rows(d)))
    screen.send_keys("exit 3\n")
    status = wait(browser, lambda d: css(d, ".terminal-panel[data-state=exited] .terminal-status"))[0]
    assert status.text == "exited with code 3"
    # Nothing the page did was refused by its Content-Security-Policy.
    refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert not refused, refused


def hangar_on_a_pty(relay, *args, size=(33, 101)):  # noqa: F811
    """`hangar` (beside the relay's binary) with a new PTY as its stdin, stdout and stderr, of
    `size` (rows, columns): the process, the PTY's master side, and its other side (kept open
    here to read its settings)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    env = dict(os.environ, HANGAR_URL=relay.url, HANGAR_TOKEN=ADMIN, TERM="xterm")
    proc = subprocess.Popen(
        [str(relay_binary().with_name("hangar")), *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )
    return proc, master, slave


def read_until(master, want: bytes, timeout=20) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while want not in out:
        left = deadline - time.monotonic()
        assert left > 0, f"{want!r} not in {out!r}"
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            out += chunk
    assert want in out, f"{want!r} not in {out!r}"
    return out


def test_the_cli_opens_a_terminal_in_raw_mode_and_gives_back_the_exit_code_and_the_terminal(relay):  # noqa: F811
    master, slave = None, None
    proc, master, slave = hangar_on_a_pty(relay, "exec", "-it", "default")
    try:
        before = termios.tcgetattr(slave)
        assert before[3] & termios.ICANON and before[3] & termios.ECHO, "a PTY starts cooked"
        os.write(master, b"stty size; echo hello-$((6*7))\r")
        out = read_until(master, b"hello-42")
        # The local window's size reached the remote terminal.
        assert b"33 101" in out, out
        # Raw here while it runs: the local line discipline neither echoes nor edits.
        now = termios.tcgetattr(slave)
        assert not (now[3] & (termios.ICANON | termios.ECHO)), now
        os.write(master, b"exit 5\r")
        assert proc.wait(timeout=20) == 5
        assert termios.tcgetattr(slave) == before, "the terminal's settings are put back"

        # An error after raw mode was entered puts it back too: the remote end goes (SIGTERM here).
        proc, master2, slave2 = hangar_on_a_pty(relay, "exec", "-it", "default", "--", "sleep", "300")
        before = termios.tcgetattr(slave2)
        deadline = time.monotonic() + 20
        while termios.tcgetattr(slave2)[3] & termios.ICANON:
            assert time.monotonic() < deadline, "hangar never entered raw mode"
            time.sleep(0.05)
        proc.send_signal(15)
        assert proc.wait(timeout=20) == 1
        assert termios.tcgetattr(slave2) == before, "the terminal's settings are put back on SIGTERM"
        os.close(master2)
        os.close(slave2)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        os.close(slave)


def test_the_cli_refuses_t_without_a_terminal_as_a_usage_error(relay):  # noqa: F811
    env = dict(os.environ, HANGAR_URL=relay.url, HANGAR_TOKEN=ADMIN)
    r = subprocess.run(
        [str(relay_binary().with_name("hangar")), "exec", "-it", "default"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=30,
    )
    assert r.returncode == 2, r
    assert "-t needs a terminal on stdin" in r.stderr, r.stderr
