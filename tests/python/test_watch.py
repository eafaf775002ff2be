"""Directory watches through the unmodified e2b SDK.

The sync client polls (CreateWatcher, GetWatcherEvents, RemoveWatcher); the async client reads
the WatchDir stream. Files are made with plain Python I/O: the daemon runs on this machine.
"""

import asyncio
import os
import time
from pathlib import Path

import pytest
from e2b import (
    AsyncSandbox,
    FileType,
    FilesystemEventType,
    NotFoundException,
    InvalidArgumentException,
    SandboxException,
)

CREATE = FilesystemEventType.CREATE
WRITE = FilesystemEventType.WRITE
REMOVE = FilesystemEventType.REMOVE
RENAME = FilesystemEventType.RENAME
CHMOD = FilesystemEventType.CHMOD


def pairs(events):
    return [(e.name, e.type) for e in events]


def poll_until(handle, pred, timeout=10.0):
    """Polls a sync watch handle until ``pred(all events so far)`` holds; returns them."""
    got = []
    deadline = time.monotonic() + timeout
    while True:
        got.extend(handle.get_new_events())
        if pred(got):
            return got
        if time.monotonic() >= deadline:
            pytest.fail(f"events never matched; got {pairs(got)}")
        time.sleep(0.05)


def test_sync_watch_polls_each_kind(sandbox, tmp_path):
    handle = sandbox.files.watch_dir(str(tmp_path))
    try:
        f = tmp_path / "a.txt"
        f.write_text("")
        f.write_text("hello")
        os.chmod(f, 0o600)
        f.rename(tmp_path / "b.txt")
        (tmp_path / "b.txt").unlink()
        want = [
            ("a.txt", CREATE),
            ("a.txt", WRITE),
            ("a.txt", CHMOD),
            ("a.txt", RENAME),
            ("b.txt", CREATE),
            ("b.txt", REMOVE),
        ]
        got = poll_until(handle, lambda g: all(w in pairs(g) for w in want))
        order = [pairs(got).index(w) for w in want]
        assert order == sorted(order), pairs(got)
        assert all(e.entry is None for e in got)
        # Each call answers only what is new.
        assert handle.get_new_events() == []
    finally:
        handle.stop()
    # A stopped watcher is gone on the daemon too: the SDK refuses, and so would the daemon.
    with pytest.raises(SandboxException):
        handle.get_new_events()


def test_sync_watch_recursive_with_entries(sandbox, tmp_path):
    handle = sandbox.files.watch_dir(str(tmp_path), recursive=True, include_entry=True)
    try:
        # A tree and a file in it, made faster than a watch could be added to each directory.
        (tmp_path / "x" / "y").mkdir(parents=True)
        (tmp_path / "x" / "y" / "deep.txt").write_bytes(b"12345")
        got = poll_until(
            handle,
            lambda g: all(w in pairs(g) for w in [("x", CREATE), ("x/y", CREATE), ("x/y/deep.txt", CREATE)]),
        )
        deep = next(e for e in got if e.name == "x/y/deep.txt" and e.type == CREATE)
        assert deep.entry is not None
        assert deep.entry.name == "deep.txt"
        assert deep.entry.path == str(tmp_path / "x" / "y" / "deep.txt")
        assert deep.entry.type == FileType.FILE
        x = next(e for e in got if e.name == "x" and e.type == CREATE)
        assert x.entry is not None and x.entry.type == FileType.DIR

        # The new directory is watched: a later write there is seen, and its entry (read when
        # the event is handled) ends up showing the final size.
        (tmp_path / "x" / "y" / "deep.txt").write_bytes(b"1234567")
        poll_until(
            handle,
            lambda g: any(
                e.name == "x/y/deep.txt" and e.type == WRITE and e.entry is not None and e.entry.size == 7
                for e in g
            ),
        )
    finally:
        handle.stop()


def test_sync_watch_errors(sandbox, tmp_path):
    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.watch_dir(str(tmp_path / "file"))


def test_sync_watch_idle_watcher_expires(fresh_envd, tmp_path):
    from e2b import Sandbox

    daemon = fresh_envd("--watcher-idle-seconds", "1")
    sbx = Sandbox.create(debug=True, sandbox_url=daemon.url)
    handle = sbx.files.watch_dir(str(tmp_path))
    (tmp_path / "seen").write_text("")
    poll_until(handle, lambda g: ("seen", CREATE) in pairs(g))
    time.sleep(2.0)
    with pytest.raises(NotFoundException):
        handle.get_new_events()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def wait_for(events, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred(events):
        if time.monotonic() >= deadline:
            pytest.fail(f"events never matched; got {pairs(events)}")
        await asyncio.sleep(0.05)


def test_async_watch_stream_recursive(envd, tmp_path):
    async def main():
        sbx = await AsyncSandbox.create()
        events = []
        exits = []
        handle = await sbx.files.watch_dir(
            str(tmp_path), on_event=events.append, on_exit=exits.append, recursive=True
        )
        try:
            (tmp_path / "top.txt").write_text("1")
            (tmp_path / "d1" / "d2").mkdir(parents=True)
            (tmp_path / "d1" / "d2" / "f.txt").write_text("2")
            await wait_for(
                events,
                lambda ev: all(
                    w in pairs(ev)
                    for w in [
                        ("top.txt", CREATE),
                        ("top.txt", WRITE),
                        ("d1", CREATE),
                        ("d1/d2", CREATE),
                        ("d1/d2/f.txt", CREATE),
                    ]
                ),
            )
            (tmp_path / "d1" / "d2" / "f.txt").unlink()
            os.rename(tmp_path / "top.txt", tmp_path / "d1" / "moved.txt")
            await wait_for(
                events,
                lambda ev: all(
                    w in pairs(ev)
                    for w in [("d1/d2/f.txt", REMOVE), ("top.txt", RENAME), ("d1/moved.txt", CREATE)]
                ),
            )
            assert exits == [], "the watch is still running"
        finally:
            await handle.stop()
        assert exits == [None], "stop() ends the watch cleanly"

    run(main())


def test_async_watch_with_entries_and_errors(envd, tmp_path):
    async def main():
        sbx = await AsyncSandbox.create()
        with pytest.raises(NotFoundException):
            await sbx.files.watch_dir(str(tmp_path / "missing"), on_event=lambda e: None)
        (tmp_path / "plain").write_text("x")
        with pytest.raises(InvalidArgumentException):
            await sbx.files.watch_dir(str(tmp_path / "plain"), on_event=lambda e: None)

        events = []
        handle = await sbx.files.watch_dir(str(tmp_path), on_event=events.append, include_entry=True)
        try:
            (tmp_path / "e.bin").write_bytes(b"abc")
            os.chmod(tmp_path / "e.bin", 0o640)
            await wait_for(events, lambda ev: ("e.bin", CHMOD) in pairs(ev))
            create = next(e for e in events if e.name == "e.bin" and e.type == CREATE)
            assert create.entry is not None and create.entry.name == "e.bin"
            chmod = next(e for e in events if e.name == "e.bin" and e.type == CHMOD)
            assert chmod.entry is not None and chmod.entry.mode & 0o777 == 0o640
        finally:
            await handle.stop()

    run(main())


def test_async_watch_ends_when_the_directory_goes(envd, tmp_path):
    async def main():
        sbx = await AsyncSandbox.create()
        root = tmp_path / "root"
        root.mkdir()
        events = []
        exits = []
        await sbx.files.watch_dir(str(root), on_event=events.append, on_exit=exits.append)
        root.rmdir()
        await wait_for(exits, lambda x: len(x) == 1)
        assert exits == [None], exits
        assert (".", REMOVE) in pairs(events), pairs(events)

    run(main())
