"""Agent sessions over MCP: the `session` tool and the `hangar://sessions/<s>/events` resource,
driven by the official Python MCP SDK in both protocol modes (see test_mcp.py), against the real
relay with test harness profiles that replay recorded agent output (agents/fixtures) or hang.
"""

import json
import signal
import time
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from test_mcp import ADMIN, MODES, Relay, connect, text

# The 2025-era calls (resources/subscribe) are deprecated in the SDK; testing them is the point.
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

FIXTURES = Path(__file__).resolve().parents[2] / "agents" / "fixtures"
# Prints a fixture a line every 0.1 s, as a CLI streaming its turn would.
REPLAY = ["bash", "-c", "cat > /dev/null; while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.1; done < \"$1\"", "replay"]
INIT = '{"type":"system","subtype":"init","session_id":"x","model":"m","cwd":"/"}'
TERMINAL = {"succeeded", "failed", "crashed", "cancelled", "timed_out"}
AGENT_TEXT = "hangar/agent_text"
EVENTS_META = {AGENT_TEXT: ["events[].data"]}


def braces(s: str) -> str:
    """Braces as a harness argv writes them (single ones are placeholders)."""
    return s.replace("{", "{{").replace("}", "}}")


def harnesses(path: Path) -> Path:
    def argv(*a):
        return json.dumps(list(a))

    path.write_text(
        f"""
[harness.replay]
new = {argv(*REPLAY, str(FIXTURES / "claude-long-turn.jsonl"))}
follow_up = {argv(*REPLAY, str(FIXTURES / "claude-stream-json-executor.jsonl"))}
format = "claude-stream-json"
session_ids = "assign"

[harness.hang]
new = {argv("bash", "-c", f"cat > /dev/null; echo '{braces(INIT)}'; sleep 60")}
format = "claude-stream-json"
session_ids = "assign"
"""
    )
    return path


def session_relay(tmp: Path, env=None) -> Relay:
    return Relay({"HANGAR_HARNESSES": str(harnesses(tmp / "harnesses.toml")), **(env or {})})


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    r = session_relay(tmp_path_factory.mktemp("harnesses"))
    yield r
    r.stop()


def admin_cancel(relay: Relay, name: str):
    """Ends a hanging turn whatever became of the token that started it."""
    httpx.post(f"{relay.url}/api/sessions/{name}/cancel", headers={"Authorization": f"Bearer {ADMIN}"})


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


async def tool(c, progress=None, **args):
    """Calls `session`, asserting it succeeded; the result."""
    r = await c.call_tool("session", args, progress_callback=progress)
    assert not r.is_error, text(r)
    return r


async def wait_state(c, session: str, want: set, timeout: float = 30) -> dict:
    with anyio.fail_after(timeout):
        while True:
            s = (await tool(c, action="status", session=session)).structured_content
            if s["state"] in want:
                return s
            await anyio.sleep(0.2)


def ends_turn(e: dict) -> bool:
    return e["type"] == "run.state" and e["data"]["to"] in TERMINAL


@pytest.mark.parametrize("mode", MODES)
def test_a_session_streams_its_events_as_progress_and_a_prompt_continues_them(relay, mode):
    name = unique(f"replay-{mode}")

    async def main():
        async with connect(relay, relay.token(f"ses-{mode}"), mode) as c:
            started = await tool(c, action="start", name=name, sandbox="default", harness="replay", prompt="go")
            view = started.structured_content
            assert view["name"] == name and view["harness"] == "replay", view
            assert view["state"] in {"queued", "starting", "running"}, view
            # The fields of a session view that hold the agent's text are named.
            assert started.meta[AGENT_TEXT] == view["agent_text"] and "summary.last_message" in view["agent_text"]

            async def stream(since):
                got = []

                async def on_progress(progress, total, message):
                    got.append((progress, json.loads(message)))

                with anyio.fail_after(40):
                    r = await tool(c, on_progress, action="events", session=name, since=since, wait_seconds=25, limit=1000)
                return r, got

            first, got = await stream(0)
            page = first.structured_content
            assert first.meta == EVENTS_META
            events = page["events"]
            # Every event came as a progress notification as it was recorded, in seq order,
            # progress being its seq, and the result has the same events.
            assert [e for _, e in got] == events
            assert [p for p, _ in got] == [e["seq"] for e in events]
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
            # The call followed the whole turn: from queued to its end.
            assert events[0]["type"] == "run.state" and events[0]["data"]["source"] == "hangar"
            assert ends_turn(events[-1]) and events[-1]["data"]["to"] == "succeeded", events[-1]
            assert {e["data"]["source"] for e in events if e["type"] != "run.state"} <= {"agent", "parsed", "hangar"}
            assert any(e["data"]["source"] == "agent" for e in events)
            assert len(got) > 10 and page["next"] == events[-1]["seq"] and page["more"] is False
            assert page["state"] == "succeeded" and page["closed"] is None

            status = (await tool(c, action="status", session=name)).structured_content
            assert status["state"] == "succeeded" and len(status["turns"]) == 1
            assert status["events_cursor"] == page["next"] and status["summary"], status

            # A follow-up: its events continue the session's seq.
            follow = await tool(c, action="prompt", session=name, prompt="and now the executor")
            assert len(follow.structured_content["turns"]) == 2
            second, got2 = await stream(page["next"])
            events2 = second.structured_content["events"]
            assert [e for _, e in got2] == events2
            assert events2[0]["seq"] == page["next"] + 1
            assert [e["seq"] for e in events2] == list(range(page["next"] + 1, page["next"] + 1 + len(events2)))
            assert {e["turn"] for e in events2} == {follow.structured_content["turns"][1]["id"]}
            assert ends_turn(events2[-1]) and second.structured_content["state"] == "succeeded"

            status = await wait_state(c, name, TERMINAL)
            assert status["state"] == "succeeded" and [t["state"] for t in status["turns"]] == ["succeeded"] * 2
            listed = (await tool(c, action="list")).structured_content["sessions"]
            assert [s["name"] for s in listed] == [name]

            # Without a progress token a wait is a long poll: nothing newer and the turn over,
            # it answers at once.
            t0 = time.monotonic()
            quiet = await tool(c, action="events", session=name, since=second.structured_content["next"], wait_seconds=10)
            assert quiet.structured_content["events"] == [] and time.monotonic() - t0 < 5
            # Without a wait, a page: `limit` events from `since`, and `more`.
            part = (await tool(c, action="events", session=name, since=2, limit=3)).structured_content
            assert [e["seq"] for e in part["events"]] == [3, 4, 5] and part["next"] == 5 and part["more"] is True

    anyio.run(main)
    # The waits were counted as streams of their own kind.
    assert 'hangar_streams{kind="mcp_events",reason="done"}' in relay.metrics()


@pytest.mark.parametrize("mode", MODES)
def test_cancel_ends_a_running_turn_cancelled(relay, mode):
    name = unique(f"hang-{mode}")

    async def main():
        async with connect(relay, relay.token(f"cancel-{mode}"), mode) as c:
            await tool(c, action="start", name=name, sandbox="default", harness="hang", prompt="wait")
            # A long poll returns at the first event (the turn starting).
            with anyio.fail_after(30):
                polled = await tool(c, action="events", session=name, wait_seconds=25)
            assert polled.structured_content["events"], polled.structured_content
            # Running once the agent's first line was read.
            with anyio.fail_after(30):
                since = 0
                while True:
                    p = (await tool(c, action="events", session=name, since=since, wait_seconds=5)).structured_content
                    since = p["next"]
                    if any(e["type"] == "run.started" for e in p["events"]):
                        break
            assert p["state"] == "running", p
            cancelled = (await tool(c, action="cancel", session=name)).structured_content
            assert cancelled["name"] == name
            status = await wait_state(c, name, TERMINAL)
            assert status["state"] == "cancelled", status
            rest = (await tool(c, action="events", session=name, since=since)).structured_content["events"]
            assert ends_turn(rest[-1]) and rest[-1]["data"]["to"] == "cancelled", rest
            # Cancelling again changes nothing.
            assert (await tool(c, action="cancel", session=name)).structured_content["state"] == "cancelled"

    anyio.run(main)


async def read_events(c, uri: str) -> dict:
    r = await c.read_resource(uri)
    assert r.contents[0].meta == EVENTS_META, r.contents[0].meta
    return json.loads(r.contents[0].text)


@pytest.mark.parametrize("mode", MODES)
def test_the_events_resource_is_read_with_since_and_subscribed_to(relay, mode):
    name = unique(f"res-{mode}")
    uri = f"hangar://sessions/{name}/events"

    arrived = []

    async def main():
        updates_tx, updates_rx = anyio.create_memory_object_stream(1000)

        async def on_message(msg):
            # A listen stream's updates come to the message handler too: counted once, from
            # the subscription.
            if mode == "legacy" and getattr(msg, "method", None) == "notifications/resources/updated":
                arrived.append(time.monotonic())
                await updates_tx.send(msg.params.uri)

        token = relay.token(f"res-{mode}")
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0))
        async with http, Client(
            streamable_http_client(f"{relay.url}/mcp", http_client=http), mode=mode, message_handler=on_message
        ) as c:
            templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
            assert "hangar://sessions/{session}/events" in templates
            await tool(c, action="start", name=name, sandbox="default", harness="replay", prompt="go")
            seen = []
            updates = 0

            async def collect():
                # Each update says there is more to read from where the last read ended.
                nonlocal updates
                nxt = 0
                with anyio.fail_after(40):
                    while not (seen and ends_turn(seen[-1])):
                        assert await updates_rx.receive() == uri
                        updates += 1
                        page = await read_events(c, f"{uri}?since={nxt}")
                        assert page["session"] == name and page["subscribed"] is True, page
                        assert all(e["seq"] > nxt for e in page["events"])
                        seen.extend(page["events"])
                        nxt = page["next"]

            if mode == "legacy":
                await c.subscribe_resource(uri)
                await collect()
                await c.unsubscribe_resource(uri)
            else:

                async def pump(sub):
                    async for ev in sub:
                        arrived.append(time.monotonic())
                        await updates_tx.send(ev.uri)

                async with c.listen(resource_subscriptions=[uri]) as sub:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(pump, sub)
                        await collect()
                        tg.cancel_scope.cancel()

            seqs = [e["seq"] for e in seen]
            assert seqs == list(range(seqs[0], seqs[-1] + 1)), seqs
            # Coalesced: at most one update per 250 ms (the turn records about 40 events over
            # 3 s, a line every 0.1 s), so fewer updates than events, spaced out.
            assert 3 <= updates < len(seen) / 2, (updates, len(seen))
            gaps = [b - a for a, b in zip(arrived, arrived[1:])]
            assert min(gaps) > 0.2, gaps
            # A read without `since`: the latest events, and `next` the last one.
            latest = await read_events(c, uri)
            assert latest["events"][-1] == seen[-1] and latest["next"] == seen[-1]["seq"]
            assert latest["more"] is False and latest["state"] == "succeeded"
            assert [e["seq"] for e in latest["events"]] == list(range(1, seen[-1]["seq"] + 1))
            # With `since`: only newer ones.
            assert (await read_events(c, f"{uri}?since={latest['next']}"))["events"] == []
            tail = await read_events(c, f"{uri}?since={latest['next'] - 2}")
            assert [e["seq"] for e in tail["events"]] == [latest["next"] - 1, latest["next"]]

    anyio.run(main)
    assert 'hangar_streams{kind="mcp_events",reason="client"}' in relay.metrics()


@pytest.mark.parametrize("mode", MODES)
def test_bad_session_arguments_are_clear_errors(relay, mode):
    async def main():
        from mcp.shared.exceptions import MCPError

        async with connect(relay, relay.token(f"bad-{mode}"), mode) as c:
            name = unique("mine")
            await tool(c, action="start", name=name, sandbox="default", harness="hang", prompt="x")
            cases = [
                ({"action": "explode"}, "unknown variant `explode`"),
                ({}, "missing field `action`"),
                ({"action": "start", "name": "n", "sandbox": "default"}, 'prompt is required for action "start"'),
                ({"action": "prompt", "session": name}, 'prompt is required for action "prompt"'),
                ({"action": "status"}, 'session is required for action "status"'),
                ({"action": "events", "session": name, "wait_seconds": 26}, "wait_seconds: 26: 0 to 25"),
                ({"action": "events", "session": name, "since": -1}, "since: -1: an event's seq"),
                ({"action": "events", "session": name, "limit": 0}, "limit: 0: 1 to 1000"),
                ({"action": "status", "session": name, "prompt": "hi"}, 'prompt does not apply to action "status"'),
                ({"action": "list", "colour": "red"}, "unknown field `colour`"),
                ({"action": "status", "session": "nope"}, 'not_found: no session "nope"'),
                ({"action": "start", "name": "a/b", "sandbox": "default", "prompt": "x"}, "invalid_argument: name"),
                ({"action": "start", "name": "n2", "sandbox": "default", "harness": "nope", "prompt": "x"}, 'harness "nope"'),
                ({"action": "start", "name": "n3", "sandbox": "default", "harness": "hang", "prompt": " "}, "prompt: must not be empty"),
                ({"action": "start", "name": name, "sandbox": "default", "harness": "hang", "prompt": "x"}, "already_exists"),
                # The default claude-code without its credential, and an unusable secret.
                ({"action": "start", "name": "n4", "sandbox": "default", "prompt": "x"}, "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"),
                ({"action": "start", "name": "n5", "sandbox": "default", "harness": "hang", "prompt": "x", "secrets": ["NO_SUCH_KEY"]},
                 'no secret "NO_SUCH_KEY"'),
                # A harness without a follow-up command.
                ({"action": "prompt", "session": name, "prompt": "more"}, "no follow-up command"),
            ]
            out = [(await c.call_tool("session", args), want) for args, want in cases]
            # Another token's person does not see the session.
            async with connect(relay, relay.token(f"other-{mode}"), mode) as other:
                for action in ("status", "cancel", "events"):
                    out.append((await other.call_tool("session", {"action": action, "session": name}), "not_found"))
                with pytest.raises(MCPError, match="no session"):
                    await other.read_resource(f"hangar://sessions/{name}/events")
            for bad, want in [
                ("hangar://sessions/a/b/events", "not a session name"),
                (f"hangar://sessions/{name}/events?since=x", "since \"x\": an event's seq"),
                (f"hangar://sessions/{name}/events?colour=red", "unknown field `colour`"),
                (f"hangar://sessions/{name}/turns", "unknown resource"),
            ]:
                with pytest.raises(MCPError, match=want):
                    await c.read_resource(bad)
            await tool(c, action="cancel", session=name)
            return out

    for r, want in anyio.run(main):
        assert r.is_error and want in text(r), (want, text(r))
        assert r.structured_content["error"]["code"], r.structured_content


def test_a_waiting_events_call_is_a_stream_under_the_per_token_limit(tmp_path):
    r = session_relay(tmp_path, {"HANGAR_STREAM_MAX_PER_TOKEN": "1"})
    try:

        async def main():
            async with connect(r, r.token("limited"), "2026-07-28") as c:
                name = unique("limited")
                await tool(c, action="start", name=name, sandbox="default", harness="hang", prompt="x")
                uri = f"hangar://sessions/{name}/events"
                async with c.listen(resource_subscriptions=[uri]):
                    # The subscription holds the token's one stream (it is open once the listen
                    # stream is acknowledged and the relay followed it: retry until refused).
                    with anyio.fail_after(20):
                        while True:
                            res = await c.call_tool("session", {"action": "events", "session": name, "since": 10**6, "wait_seconds": 1})
                            if res.is_error:
                                break
                    assert "HANGAR_STREAM_MAX_PER_TOKEN" in text(res), text(res)
                    # Without a wait it is a plain read, not a stream.
                    await tool(c, action="events", session=name)
                await tool(c, action="cancel", session=name)

        anyio.run(main)
    finally:
        r.stop()


def test_revoking_a_token_ends_its_session_subscription(tmp_path):
    r = session_relay(tmp_path, {"HANGAR_STREAM_RECHECK_SECONDS": "0.5"})
    try:
        token_id, secret = r.token_with_id("revoked")
        names = []

        async def main():
            async with connect(r, secret, "2026-07-28") as c:
                name = unique("revoked")
                names.append(name)
                await tool(c, action="start", name=name, sandbox="default", harness="hang", prompt="x")
                uri = f"hangar://sessions/{name}/events"
                with anyio.fail_after(20):
                    async with c.listen(resource_subscriptions=[uri]) as sub:
                        await anyio.to_thread.run_sync(r.revoke, token_id)
                        # The relay closes the stream; the listen stream gets its final result and
                        # the loop ends (a lost stream would raise instead).
                        seen = [ev.uri async for ev in sub]
                assert set(seen) <= {uri}

        anyio.run(main)
        assert 'hangar_streams{kind="mcp_events",reason="revoked"} 1' in r.metrics()
        for n in names:
            admin_cancel(r, n)
    finally:
        r.stop()


def test_shutdown_ends_a_session_subscription_with_its_final_result(tmp_path):
    r = session_relay(tmp_path)
    try:

        async def main():
            async with connect(r, r.token("shut"), "2026-07-28") as c:
                name = unique("shut")
                await tool(c, action="start", name=name, sandbox="default", harness="replay", prompt="x")
                uri = f"hangar://sessions/{name}/events"
                with anyio.fail_after(20):
                    async with c.listen(resource_subscriptions=[uri]) as sub:
                        events = sub.__aiter__()
                        # Live once the first update (the replay's events) reaches it.
                        assert (await events.__anext__()).uri == uri
                        r.proc.send_signal(signal.SIGTERM)
                        seen = [ev.uri async for ev in events]
                assert set(seen) <= {uri}

        anyio.run(main)
    finally:
        r.stop()
