"""The relay's MCP endpoint, driven by the official Python MCP SDK (`mcp`), once speaking the
2026-07-28 revision (stateless) and once a 2025-era one (the initialize handshake, sessions).

Each test runs against the real hangar-relay and the hangar-envd daemons its local sandboxes
start: the binary is HANGAR_RELAY_BIN, or hangar-relay next to hangar-envd.
"""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import jsonschema
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import envd_binary

ADMIN = "admin-secret-for-mcp-tests"
LISTEN_RE = re.compile(r"^hangar-relay listening on (http://[0-9.:\[\]a-fA-F]+:\d+)\s*$")
MODES = ["2026-07-28", "legacy"]
# The 2025-era calls (resources/subscribe) are deprecated in the SDK; testing them is the point.
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def relay_binary() -> Path:
    p = os.environ.get("HANGAR_RELAY_BIN")
    return Path(p) if p else envd_binary().with_name("hangar-relay")


class Relay:
    def __init__(self, env=None):
        self.state = Path(tempfile.mkdtemp(prefix="hangar-mcp-"))
        self.log_path = self.state.with_suffix(".log")
        e = dict(os.environ, HANGAR_ADMIN_TOKEN=ADMIN, HANGAR_ENVD_BIN=str(envd_binary()))
        e.update(env or {})
        self.proc = subprocess.Popen(
            [str(relay_binary()), "serve", "--listen", "127.0.0.1:0", "--state-dir", str(self.state)],
            env=e,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=open(self.log_path, "wb"),
            text=True,
        )
        deadline = time.monotonic() + 30
        self.url = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = LISTEN_RE.match(line)
            if m:
                self.url = m.group(1)
                break
        if self.url is None:
            self.stop()
            pytest.fail(f"hangar-relay printed no address:\n{self.log_path.read_text(errors='replace')}")
        # These tests use the default sandbox with agents' tokens: shared with every person, as a
        # team relay would share it (it is the admins' until then).
        self.share("default", ["*"])

    def share(self, sandbox: str, persons):
        r = httpx.patch(
            f"{self.url}/api/sandboxes/{sandbox}",
            json={"shared_with": persons},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 200, r.text

    def token(self, name: str, scope: str = "mcp") -> str:
        return self.token_with_id(name, scope)[1]

    def token_with_id(self, name: str, scope: str = "mcp"):
        r = httpx.post(
            f"{self.url}/api/tokens",
            json={"name": name, "scope": scope},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["secret"]

    def revoke(self, token_id: str):
        r = httpx.delete(f"{self.url}/api/tokens/{token_id}", headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 204, r.text

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Local sandboxes' daemons outlive the relay by design: end the ones this relay started.
        out = subprocess.run(["pgrep", "-f", f"{self.state}/"], capture_output=True, text=True).stdout
        for pid in out.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        # As root, each local sandbox's work directory is an image of HANGAR_LOCAL_DISK_MIB with
        # its blocks reserved, mounted on the host: left behind, dozens of relays fill the disk.
        unmount_under(self.state)
        shutil.rmtree(self.state, ignore_errors=True)


def unmount_under(directory: Path):
    """Detaches every mount under `directory` (deepest first)."""
    prefix = str(directory).rstrip("/") + "/"
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


@pytest.fixture(scope="module")
def relay():
    r = Relay()
    yield r
    r.stop()


@asynccontextmanager
async def connect(relay: Relay, token: str, mode: str):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0)
    )
    async with http:
        async with Client(streamable_http_client(f"{relay.url}/mcp", http_client=http), mode=mode) as c:
            yield c


def text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def marker() -> str:
    """A unique name for a test's command to run under (`exec -a NAME sleep ...`)."""
    return f"hangar-mcp-{os.getpid()}-{time.monotonic_ns()}"


def host_pid_named(name: str, timeout: float = 10) -> int:
    """The host pid of the command that runs under `name` (`exec -a`). Inside a sandbox `$$` is
    a pid of the sandbox's own PID namespace (a relay run as root isolates its sandboxes), and
    the host's /tmp is not the sandbox's to write: the tests find their commands by name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-f", f"^{name}( |$)"], capture_output=True, text=True).stdout.split()
        if out:
            return int(out[0])
        time.sleep(0.05)
    pytest.fail(f"no process runs as {name}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.parametrize("mode", MODES)
def test_tools_are_listed_and_sandboxes_says_which_have_a_daemon(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"list-{mode}"), mode) as c:
            if mode == "legacy":
                assert c.protocol_version < "2026-07-28"
            else:
                assert c.protocol_version == "2026-07-28"
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"sandboxes", "exec", "process", "session"} <= names
            templates = (await c.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == [
                "hangar://sandboxes/{sandbox}/watch?path={path}&recursive={recursive}",
                "hangar://sessions/{session}/events",
                "hangar://jobs/{job}/events",
            ]
            r = await c.call_tool("sandboxes", {})
            assert not r.is_error, text(r)
            default = [s for s in r.structured_content["sandboxes"] if s["name"] == "default"]
            assert default and isinstance(default[0]["daemon"], bool)

    anyio.run(main)


# What each tool tells a client it may do: (readOnlyHint, destructiveHint, idempotentHint,
# openWorldHint). A client may auto-approve what only reads.
HINTS = {
    "sandboxes": (True, False, True, False),
    # Any command: it may delete, kill, reach the network.
    "exec": (False, True, False, True),
    # list and attach read, but start runs any command and kill kills.
    "process": (False, True, False, True),
    # status, list and events read, but start runs an agent and cancel ends its turn.
    "session": (False, True, False, True),
    # status and list read, but start runs an agent (and may create a sandbox) and cancel ends it.
    "job": (False, True, False, True),
    # list reads, but allow lets an agent run a call that may do anything, and a decision is once.
    "inbox": (False, True, False, True),
}


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_is_annotated_and_only_listing_sandboxes_is_read_only(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"hints-{mode}"), mode) as c:
            return (await c.list_tools()).tools

    tools = anyio.run(main)
    assert set(HINTS) <= {t.name for t in tools}
    for t in tools:
        a = t.annotations
        assert a is not None and a.title, t
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        # Every hint said, none left to the spec's defaults.
        assert all(isinstance(h, bool) for h in hints), t
        assert not (a.read_only_hint and a.destructive_hint), t
        if t.name in HINTS:
            assert hints == HINTS[t.name], t


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_publishes_an_output_schema_that_the_sdk_holds_its_results_to(relay, mode):
    """Every tool's results are typed: `tools/list` publishes each one's `outputSchema` (an object
    schema, whatever the action) and the SDK validates every successful call's
    `structuredContent` against it, so each test of a tool's action here (test_mcp*.py) checks
    its result's shape too. This shows that check is on, and that the text is the same JSON."""

    async def main():
        async with connect(relay, relay.token(f"schemas-{mode}"), mode) as c:
            tools = (await c.list_tools()).tools
            ok = await c.call_tool("exec", {"sandbox": "default", "command": "echo hi"})
            bad = ok.model_copy(update={"structured_content": {"stdout": "hi\n"}})
            try:
                await c.session.validate_tool_result("exec", bad)
                refused = None
            except RuntimeError as e:
                refused = str(e)
            return tools, ok, refused

    tools, ok, refused = anyio.run(main)
    assert {t.name for t in tools} == set(HINTS)
    for t in tools:
        schema = t.output_schema
        assert schema and schema["type"] == "object", t
        jsonschema.Draft202012Validator.check_schema(schema)
    assert not ok.is_error and ok.structured_content["stdout"] == "hi\n", text(ok)
    assert json.loads(text(ok)) == ok.structured_content
    assert refused and "exit_code" in refused, refused


@pytest.mark.parametrize("mode", MODES)
def test_streamed_exec_sends_every_chunk_in_order_then_the_result(relay, mode):
    got = []

    async def on_progress(progress, total, message):
        got.append((progress, message))

    async def main():
        async with connect(relay, relay.token(f"stream-{mode}"), mode) as c:
            cmd = "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo oops >&2; exit 3"
            r = await c.call_tool(
                "exec", {"sandbox": "default", "command": cmd, "stream": True}, progress_callback=on_progress
            )
            return r

    r = anyio.run(main)
    assert not r.is_error, text(r)
    s = r.structured_content
    assert s["exit_code"] == 3 and s["streamed"] is True
    assert s["stdout"] == "".join(f"line{i}\n" for i in range(1, 6))
    assert s["stderr"] == "oops\n"
    messages = "".join(m for _, m in got)
    assert messages == s["stdout"] + "oops\n", got
    # More than one chunk arrived (the output was printed over half a second), in order.
    assert len(got) >= 3, got
    progress = [p for p, _ in got]
    assert progress == sorted(progress) and progress[-1] == len(messages.encode())
    assert r.meta and r.meta.get("hangar/sandbox_output") == ["stdout", "stderr"]
    # The stream was counted under its own kind.
    assert 'hangar_streams{kind="mcp_exec",reason="done"}' in relay.metrics()


@pytest.mark.parametrize("mode", MODES)
def test_unstreamed_exec_returns_the_output_in_one_piece(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"plain-{mode}"), mode) as c:
            return await c.call_tool("exec", {"sandbox": "default", "command": "echo hi"})

    r = anyio.run(main)
    assert not r.is_error, text(r)
    assert r.structured_content["stdout"] == "hi\n" and r.structured_content["streamed"] is False


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_a_streamed_exec_kills_the_command(relay, mode):
    name = marker()
    pids = []

    async def main():
        first = anyio.Event()

        async def on_progress(progress, total, message):
            first.set()

        async with connect(relay, relay.token(f"cancel-{mode}"), mode) as c:
            async with anyio.create_task_group() as tg:

                async def call():
                    await c.call_tool(
                        "exec",
                        {
                            "sandbox": "default",
                            "command": f"echo started; exec -a {name} sleep 60",
                            "stream": True,
                        },
                        progress_callback=on_progress,
                    )

                tg.start_soon(call)
                with anyio.fail_after(20):
                    await first.wait()
                pids.append(await anyio.to_thread.run_sync(host_pid_named, name))
                tg.cancel_scope.cancel()
            # Let the cancellation reach the relay while the session is still open.
            await anyio.sleep(0.5)

    anyio.run(main)
    pid = pids[0]
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid), f"the command {pid} outlived its cancelled call"


@pytest.mark.parametrize("mode", MODES)
def test_bad_arguments_are_clear_tool_errors(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"bad-{mode}"), mode) as c:
            cases = [
                ({"sandbox": "default"}, "command"),
                ({"sandbox": "default", "command": "  "}, "command must not be empty"),
                ({"sandbox": "default", "command": "true", "timeout": 0}, "timeout: 1 to"),
                ({"sandbox": "default", "command": "true", "colour": "red"}, "colour"),
                ({"sandbox": "nope", "command": "true"}, 'no sandbox "nope"'),
                ({"sandbox": "default", "command": "true", "cwd": "no/such/dir"}, "invalid_argument: cwd"),
                ({"sandbox": "default", "command": "true", "cwd": "no/such/dir", "stream": True}, "invalid_argument: cwd"),
                ({"sandbox": "default", "command": "echo a\u0000b"}, "invalid_argument: command must not contain a NUL"),
            ]
            out = []
            for args, want in cases:
                async def ignore(progress, total, message):
                    pass

                # A streamed call needs a progress token: the callback makes the SDK send one.
                cb = ignore if args.get("stream") else None
                r = await c.call_tool("exec", args, progress_callback=cb)
                out.append((r, want))
            return out

    for r, want in anyio.run(main):
        assert r.is_error, text(r)
        assert want in text(r), text(r)


def test_a_jobs_token_no_token_and_a_foreign_host_are_refused():
    # Plain HTTP: the SDK would hide the status.
    r = Relay()
    try:
        jobs = r.token("jobs", "jobs")
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        assert httpx.post(f"{r.url}/mcp", json=body, headers=h).status_code == 401
        resp = httpx.post(f"{r.url}/mcp", json=body, headers={**h, "Authorization": f"Bearer {jobs}"})
        assert resp.status_code == 403, resp.text
        # Only the allowed hosts (DNS-rebinding protection): the default is loopback names.
        admin = {**h, "Authorization": f"Bearer {ADMIN}"}
        resp = httpx.post(f"{r.url}/mcp", json=body, headers={**admin, "Host": "evil.example"})
        assert resp.status_code == 403, resp.text
        # The relay's JSON error, naming the setting that would allow it.
        err = resp.json()["error"]
        assert err["code"] == "permission_denied" and "--mcp-allowed-hosts" in err["message"], err
    finally:
        r.stop()


def test_closing_a_2025_era_session_ends_it_and_the_sdk_logs_no_failure(relay, caplog):
    # The SDK sends DELETE /mcp as it closes a session, and warns "Session termination failed"
    # unless the answer is 200 or 204.
    caplog.set_level(logging.DEBUG, logger="mcp.client.streamable_http")
    deletes = []

    async def on_response(response):
        if response.request.method == "DELETE":
            deletes.append(response.status_code)

    async def main():
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {relay.token('close-legacy')}"},
            timeout=httpx2.Timeout(30.0),
            event_hooks={"response": [on_response]},
        )
        async with http, Client(streamable_http_client(f"{relay.url}/mcp", http_client=http), mode="legacy") as c:
            assert c.protocol_version < "2026-07-28"
            await c.list_tools()

    anyio.run(main)
    assert deletes == [204]
    failed = [r.getMessage() for r in caplog.records if "Session termination failed" in r.getMessage()]
    assert failed == [], caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_streams_over_the_limit_are_refused_with_the_limit_named(mode):
    r = Relay({"HANGAR_STREAM_MAX_PER_TOKEN": "1"})
    try:

        async def main():
            first = anyio.Event()

            async def on_progress(progress, total, message):
                first.set()

            token = r.token("limited")
            async with connect(r, token, mode) as c:
                async with anyio.create_task_group() as tg:

                    async def hold():
                        await c.call_tool(
                            "exec",
                            {"sandbox": "default", "command": "echo go; sleep 2", "stream": True},
                            progress_callback=on_progress,
                        )

                    tg.start_soon(hold)
                    with anyio.fail_after(20):
                        await first.wait()
                    second = await c.call_tool(
                        "exec",
                        {"sandbox": "default", "command": "echo no", "stream": True},
                        progress_callback=on_progress,
                    )
                    tg.cancel_scope.cancel()
                return second

        second = anyio.run(main)
        assert second.is_error
        assert "HANGAR_STREAM_MAX_PER_TOKEN" in text(second), text(second)
    finally:
        r.stop()


@pytest.mark.parametrize("mode", MODES)
def test_process_start_attach_since_and_wait_input_kill_list(relay, mode):
    got = []

    async def on_progress(progress, total, message):
        got.append((progress, message))

    async def main():
        async with connect(relay, relay.token(f"proc-{mode}"), mode) as c:

            async def process(**args):
                r = await c.call_tool("process", {"sandbox": "default", **args}, progress_callback=on_progress)
                assert not r.is_error, text(r)
                return r.structured_content

            # A process that prints, then echoes its stdin until eof.
            started = await process(action="start", command="echo one; echo two; cat; echo bye")
            pid = started["process_id"]
            assert pid.startswith("p_")
            assert pid in [p["process_id"] for p in (await process(action="list"))["processes"]]
            # The start answers once the process runs, not once it has printed: wait for that.
            for _ in range(200):
                listed = (await process(action="list"))["processes"]
                if any(p["process_id"] == pid and p["output_bytes"] >= len("one\ntwo\n") for p in listed):
                    break
                await anyio.sleep(0.02)

            # Everything so far, no wait.
            first = await process(action="attach", process_id=pid)
            assert first["output"] == "one\ntwo\n" and first["state"] == "running"
            assert first["next"] == len("one\ntwo\n")
            # From `next`: only what is new, and what comes during the wait arrives as progress.
            got.clear()
            async with anyio.create_task_group() as tg:

                async def later():
                    await anyio.sleep(0.5)
                    await process(action="input", process_id=pid, input="three\n")

                tg.start_soon(later)
                second = await process(action="attach", process_id=pid, since=first["next"], wait_seconds=2)
            assert second["output"] == "three\n", second
            assert [m for _, m in got] == ["three\n"]
            assert second["next"] == first["next"] + len("three\n")
            # With `since` inside what was printed: just the rest.
            part = await process(action="attach", process_id=pid, since=4)
            assert part["output"] == "two\nthree\n"

            await process(action="input", process_id=pid, eof=True)
            end = await process(action="attach", process_id=pid, since=second["next"], wait_seconds=10)
            assert end["output"] == "bye\n" and end["state"] == "exited" and end["exit_code"] == 0

            sleeper = (await process(action="start", command="sleep 60"))["process_id"]
            await process(action="kill", process_id=sleeper)
            dead = await process(action="attach", process_id=sleeper, wait_seconds=10)
            assert dead["state"] == "exited" and dead["exit_code"] != 0

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_a_process_belongs_to_the_token_that_started_it(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"owner-{mode}"), mode) as a, connect(
            relay, relay.token(f"other-{mode}"), mode
        ) as b:
            r = await a.call_tool("process", {"sandbox": "default", "action": "start", "command": "sleep 30"})
            pid = r.structured_content["process_id"]
            listed = await b.call_tool("process", {"sandbox": "default", "action": "list"})
            assert pid not in [p["process_id"] for p in listed.structured_content["processes"]]
            for args in (
                {"action": "attach", "process_id": pid},
                {"action": "input", "process_id": pid, "input": "x"},
                {"action": "kill", "process_id": pid},
            ):
                r = await b.call_tool("process", {"sandbox": "default", **args})
                assert r.is_error and "not_found" in text(r), (args, text(r))
            await a.call_tool("process", {"sandbox": "default", "action": "kill", "process_id": pid})

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_process_bad_arguments_are_clear_tool_errors(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"pbad-{mode}"), mode) as c:
            cases = [
                ({"action": "start"}, "command is required"),
                ({"action": "attach"}, "process_id is required"),
                ({"action": "attach", "process_id": "p_000000000000", "wait_seconds": 601}, "wait_seconds: 0 to 600"),
                ({"action": "explode"}, "unknown variant"),
                ({"action": "attach", "process_id": "../etc"}, "no process"),
                ({"action": "start", "command": "true", "cwd": "no/such/dir"}, "invalid_argument: cwd"),
            ]
            out = []
            for args, want in cases:
                out.append((await c.call_tool("process", {"sandbox": "default", **args}), want))
            return out

    for r, want in anyio.run(main):
        assert r.is_error and want in text(r), text(r)


def workdir(relay: Relay) -> Path:
    r = httpx.get(f"{relay.url}/api/sandboxes/default", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text
    return Path(r.json()["workdir"])


async def read_watch(c, uri: str) -> dict:
    import json

    r = await c.read_resource(uri)
    assert r.contents[0].meta == {"hangar/sandbox_output": ["events"]}
    return json.loads(r.contents[0].text)


@pytest.mark.parametrize("mode", MODES)
def test_a_watch_subscription_gets_updates_and_reads_them_with_since(relay, mode):
    name = f"watched-{mode}"
    d = workdir(relay) / name
    d.mkdir(parents=True, exist_ok=True)
    uri = f"hangar://sandboxes/default/watch?path={name}"

    async def main():
        updates_tx, updates_rx = anyio.create_memory_object_stream(100)

        async def on_message(msg):
            if getattr(msg, "method", None) == "notifications/resources/updated":
                await updates_tx.send(msg.params.uri)

        token = relay.token(f"watch-{mode}")
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0))
        async with http, Client(
            streamable_http_client(f"{relay.url}/mcp", http_client=http), mode=mode, message_handler=on_message
        ) as c:
            types = []
            nxt = 0

            async def collect(want):
                nonlocal nxt
                with anyio.fail_after(20):
                    while not want <= set(types):
                        got = await updates_rx.receive()
                        assert got == uri
                        page = await read_watch(c, f"{uri}&since={nxt}")
                        assert page["watching"] is True
                        for e in page["events"]:
                            assert e["seq"] > nxt and {"seq", "ts", "name", "type"} <= set(e)
                            types.append(e["type"])
                        nxt = page["next"]

            async def run(sub_ready):
                await sub_ready.wait()
                await anyio.sleep(0.3)
                (d / "a.txt").write_text("hello")
                await anyio.sleep(0.4)
                with open(d / "a.txt", "a") as f:
                    f.write(" again")
                await anyio.sleep(0.4)
                (d / "a.txt").unlink()

            ready = anyio.Event()
            if mode == "legacy":
                await c.subscribe_resource(uri)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run, ready)
                    ready.set()
                    await collect({"create", "write", "remove"})
                before = nxt
                # `since` = the last next: nothing new.
                assert (await read_watch(c, f"{uri}&since={before}"))["events"] == []
                (d / "b.txt").write_text("x")
                with anyio.fail_after(10):
                    while True:
                        page = await read_watch(c, f"{uri}&since={before}")
                        if page["events"]:
                            break
                        await anyio.sleep(0.1)
                assert all(e["seq"] > before for e in page["events"])
                assert {e["name"] for e in page["events"]} == {"b.txt"}
                await c.unsubscribe_resource(uri)
            else:

                async def pump(sub):
                    async for ev in sub:
                        await updates_tx.send(ev.uri)

                async with c.listen(resource_subscriptions=[uri]) as sub:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(pump, sub)
                        tg.start_soon(run, ready)
                        ready.set()
                        await collect({"create", "write", "remove"})
                        before = nxt
                        assert (await read_watch(c, f"{uri}&since={before}"))["events"] == []
                        (d / "b.txt").write_text("x")
                        with anyio.fail_after(10):
                            while True:
                                page = await read_watch(c, f"{uri}&since={before}")
                                if page["events"]:
                                    break
                                await anyio.sleep(0.1)
                        assert {e["name"] for e in page["events"]} == {"b.txt"}
                        tg.cancel_scope.cancel()

    anyio.run(main)


def test_watch_subscriptions_over_the_limit_name_it_and_bad_uris_are_refused():
    r = Relay({"HANGAR_WATCH_MAX_PER_TOKEN": "1"})
    try:
        base = workdir(r)
        for n in ("one", "two"):
            (base / n).mkdir(parents=True, exist_ok=True)

        async def main():
            from mcp.shared.exceptions import MCPError

            async with connect(r, r.token("watcher"), "legacy") as c:
                await c.subscribe_resource("hangar://sandboxes/default/watch?path=one")
                with pytest.raises(MCPError, match="HANGAR_WATCH_MAX_PER_TOKEN"):
                    await c.subscribe_resource("hangar://sandboxes/default/watch?path=two")
                with pytest.raises(MCPError, match="unknown resource"):
                    await c.subscribe_resource("hangar://elsewhere/x")
                with pytest.raises(MCPError, match="path is empty"):
                    await read_watch(c, "hangar://sandboxes/default/watch?path=")

        anyio.run(main)
    finally:
        r.stop()


@pytest.mark.parametrize("mode", MODES)
def test_revoking_a_token_ends_its_streamed_exec_and_kills_the_command(mode):
    r = Relay({"HANGAR_STREAM_RECHECK_SECONDS": "0.5"})
    name = marker()
    pids = []
    try:
        token_id, secret = r.token_with_id("revoked")

        async def main():
            async def on_progress(progress, total, message):
                if "go" in (message or ""):
                    pids.append(await anyio.to_thread.run_sync(host_pid_named, name))
                    await anyio.to_thread.run_sync(r.revoke, token_id)

            async with connect(r, secret, mode) as c:
                # The SDK lists tools to check a result; list them while the token is good.
                await c.list_tools()
                with anyio.fail_after(30):
                    return await c.call_tool(
                        "exec",
                        {"sandbox": "default", "command": f"echo go; exec -a {name} sleep 60", "stream": True},
                        progress_callback=on_progress,
                    )

        res = anyio.run(main)
        assert not res.is_error, text(res)
        assert res.structured_content["closed"] == "revoked", res.structured_content
        assert res.structured_content["stdout"] == "go\n"
        pid = pids[0]
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid), "a revoked token's command kept running"
    finally:
        r.stop()


def test_shutdown_ends_a_streamed_exec_with_its_reason_and_spares_the_command():
    r = Relay()
    name = marker()
    try:

        async def main():
            async def on_progress(progress, total, message):
                if "go" in (message or ""):
                    r.proc.send_signal(signal.SIGTERM)

            async with connect(r, r.token("shut"), "2026-07-28") as c:
                await c.list_tools()
                with anyio.fail_after(30):
                    return await c.call_tool(
                        "exec",
                        {"sandbox": "default", "command": f"echo go; exec -a {name} sleep 60", "stream": True},
                        progress_callback=on_progress,
                    )

        res = anyio.run(main)
        assert res.structured_content["closed"] == "shutdown", res.structured_content
        pid = host_pid_named(name)
        # Cut off by a shutdown, the command runs on to its end or timeout.
        assert pid_alive(pid)
        os.kill(pid, signal.SIGKILL)
    finally:
        r.stop()


def plain_image_available() -> bool:
    """The Docker test image without a daemon, built by images/build-test-images when missing.
    Without Docker the test is skipped, except under CI=true, where it must run."""
    if os.environ.get("CI") == "true":
        return True
    try:
        subprocess.run(["docker", "info"], capture_output=True, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError):
        return False
    return True


def ensure_plain_image() -> None:
    inspect = subprocess.run(["docker", "image", "inspect", "hangar-test:plain"], capture_output=True)
    if inspect.returncode != 0:
        repo = Path(__file__).resolve().parents[2]
        subprocess.run([str(repo / "images" / "build-test-images")], check=True, env={**os.environ})


@pytest.mark.skipif(not plain_image_available(), reason="needs Docker (never skipped under CI=true)")
@pytest.mark.parametrize("mode", MODES)
def test_without_a_daemon_exec_comes_in_one_piece_and_a_watch_says_it_needs_one(relay, mode):
    ensure_plain_image()
    name = f"plain-mcp-{os.getpid()}-{mode.replace('-', '')}"
    admin = {"Authorization": f"Bearer {ADMIN}"}
    r = httpx.post(
        f"{relay.url}/api/sandboxes",
        json={"name": name, "provider": "docker", "options": {"image": "hangar-test:plain"}},
        headers=admin,
        timeout=120,
    )
    assert r.status_code == 201, r.text
    # The admin's sandbox, shared with the agent's person (every person).
    relay.share(name, ["*"])
    try:

        async def main():
            from mcp.shared.exceptions import MCPError

            got = []

            async def on_progress(progress, total, message):
                got.append(message)

            async with connect(relay, relay.token(f"plain-{mode}"), mode) as c:
                listed = (await c.call_tool("sandboxes", {})).structured_content["sandboxes"]
                assert [s["daemon"] for s in listed if s["name"] == name] == [False]
                res = await c.call_tool(
                    "exec",
                    {"sandbox": name, "command": "echo a; sleep 0.2; echo b", "stream": True},
                    progress_callback=on_progress,
                )
                assert not res.is_error, text(res)
                assert res.structured_content["streamed"] is False
                assert res.structured_content["stdout"] == "a\nb\n"
                assert got == ["a\nb\n"], got
                uri = f"hangar://sandboxes/{name}/watch?path=/tmp"
                page = await read_watch(c, uri)
                assert page["watching"] is False and "needs the daemon" in page["message"]
                if mode == "legacy":
                    with pytest.raises(MCPError, match="needs the daemon"):
                        await c.subscribe_resource(uri)
                else:
                    from mcp.client.subscriptions import SubscriptionLost

                    # The listen stream is acknowledged first; the refusal ends it, with the error.
                    with anyio.fail_after(10):
                        with pytest.raises(SubscriptionLost) as e:
                            async with c.listen(resource_subscriptions=[uri]) as sub:
                                async for _ in sub:
                                    pass
                    assert "needs the daemon" in str(e.value.__cause__), repr(e.value.__cause__)

        anyio.run(main)
    finally:
        httpx.delete(f"{relay.url}/api/sandboxes/{name}", headers=admin, timeout=120)


def test_revoking_a_token_ends_its_listen_stream_gracefully():
    r = Relay({"HANGAR_STREAM_RECHECK_SECONDS": "0.5"})
    try:
        (workdir(r) / "revoked-watch").mkdir(parents=True, exist_ok=True)
        token_id, secret = r.token_with_id("listener")
        uri = "hangar://sandboxes/default/watch?path=revoked-watch"

        async def main():
            async with connect(r, secret, "2026-07-28") as c:
                with anyio.fail_after(20):
                    async with c.listen(resource_subscriptions=[uri]) as sub:
                        await anyio.to_thread.run_sync(r.revoke, token_id)
                        # The relay closes the watch; the listen stream gets its final result and
                        # the loop ends (a lost stream would raise instead).
                        seen = [ev.uri async for ev in sub]
                assert set(seen) <= {uri}

        anyio.run(main)
        assert 'hangar_streams{kind="mcp_watch",reason="revoked"} 1' in r.metrics()
    finally:
        r.stop()


def test_shutdown_ends_a_listen_stream_with_its_final_result():
    r = Relay()
    try:
        (workdir(r) / "shut-watch").mkdir(parents=True, exist_ok=True)
        uri = "hangar://sandboxes/default/watch?path=shut-watch"

        async def main():
            async with connect(r, r.token("shut-listen"), "2026-07-28") as c:
                with anyio.fail_after(20):
                    async with c.listen(resource_subscriptions=[uri]) as sub:
                        events = sub.__aiter__()
                        # The subscription is live once a change reaches it: touch files until one does.
                        async with anyio.create_task_group() as tg:

                            async def touch():
                                for i in range(100):
                                    (workdir(r) / "shut-watch" / f"f{i}").write_text("x")
                                    await anyio.sleep(0.2)

                            tg.start_soon(touch)
                            first = await events.__anext__()
                            tg.cancel_scope.cancel()
                        assert first.uri == uri
                        r.proc.send_signal(signal.SIGTERM)
                        # The listen stream gets its final result and the loop ends; a lost
                        # stream would raise instead.
                        seen = [ev.uri async for ev in events]
                assert set(seen) <= {uri}

        anyio.run(main)
    finally:
        r.stop()
