"""The inbox over MCP: the `inbox` tool lists what waits on the caller's person and answers it,
driven by the official Python MCP SDK in both protocol modes against the real relay, with an
agent (a harness) that asks through the real agent-side command and says what it was told.
"""

import json
import time
from pathlib import Path

import anyio
import httpx
import pytest

from test_mcp import ADMIN, MODES, Relay, connect, text

AGENT_TEXT = "hangar/agent_text"
ASKER = (
    'cat >/dev/null; a=$("$HANGAR_AGENT" question "Which database?" --option postgres --option sqlite); '
    'echo "chose $a"; sleep 0.5'
)


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    path = tmp_path_factory.mktemp("inbox") / "h.toml"
    path.write_text(
        f"""
[harness.asker]
new = {json.dumps(["bash", "-c", ASKER])}
format = "claude-stream-json"

[harness.fails]
new = ["bash", "-c", "cat >/dev/null; exit 5"]
format = "text"
"""
    )
    r = Relay({"HANGAR_HARNESSES": str(path)})
    yield r
    r.stop()


def start(relay: Relay, token: str, name: str, harness: str):
    r = httpx.post(
        f"{relay.url}/api/sessions",
        json={"name": name, "sandbox": "default", "harness": harness, "prompt": "go"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text


def printed(relay: Relay, token: str, name: str):
    r = httpx.get(f"{relay.url}/api/sessions/{name}/events?limit=1000", headers={"Authorization": f"Bearer {token}"})
    return [e["data"].get("raw") for e in r.json()["events"] if e["data"].get("raw")]


async def first_item(c, session: str):
    """Lists the inbox through the tool until an item of `session` is open; the listing and it."""
    with anyio.fail_after(30):
        while True:
            r = await c.call_tool("inbox", {"action": "list"})
            assert not r.is_error, text(r)
            items = [i for i in r.structured_content["items"] if i["session_name"] == session]
            if items:
                return r, items[0]
            await anyio.sleep(0.2)


@pytest.mark.parametrize("mode", MODES)
def test_a_question_is_listed_and_answered_through_the_tool_and_the_agent_goes_on(relay, mode):
    token = relay.token(f"inbox-{mode}")
    name = f"ask-{mode}-{time.monotonic_ns()}"
    start(relay, token, name, "asker")

    async def main():
        async with connect(relay, token, mode) as c:
            r, item = await first_item(c, name)
            assert (item["kind"], item["text"], item["options"]) == ("question", "Which database?", ["postgres", "sqlite"])
            # The agent's words are named as such.
            assert "items[].text" in r.meta[AGENT_TEXT] and "items[].options" in r.meta[AGENT_TEXT]
            bad = await c.call_tool("inbox", {"action": "answer", "item": item["ask_id"], "reason": "x"})
            assert bad.is_error and "reason does not apply" in text(bad), text(bad)
            wrong = await c.call_tool("inbox", {"action": "allow", "item": item["ask_id"]})
            assert wrong.is_error and "only an approval" in text(wrong), text(wrong)
            done = await c.call_tool("inbox", {"action": "answer", "item": item["ask_id"], "answer": "sqlite"})
            assert not done.is_error, text(done)
            assert done.structured_content["state"] == "answered"
            again = await c.call_tool("inbox", {"action": "answer", "item": item["ask_id"], "answer": "postgres"})
            assert again.is_error and "already" in text(again), text(again)

    anyio.run(main)
    deadline = time.monotonic() + 20
    while "chose sqlite" not in printed(relay, token, name):
        assert time.monotonic() < deadline, printed(relay, token, name)
        time.sleep(0.2)


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_is_acked_and_another_persons_items_do_not_exist(relay, mode):
    token = relay.token(f"fails-{mode}")
    other = relay.token(f"other-{mode}")
    name = f"fails-{mode}-{time.monotonic_ns()}"
    start(relay, token, name, "fails")

    async def main():
        async with connect(relay, token, mode) as c:
            _, item = await first_item(c, name)
            assert item["kind"] == "failed"
        async with connect(relay, other, mode) as c:
            nope = await c.call_tool("inbox", {"action": "ack", "item": item["id"]})
            assert nope.is_error and "not_found" in text(nope), text(nope)
        async with connect(relay, token, mode) as c:
            acked = await c.call_tool("inbox", {"action": "ack", "item": item["id"]})
            assert not acked.is_error and acked.structured_content["state"] == "acked", text(acked)
            ended = await c.call_tool("inbox", {"action": "list", "ended": True})
            assert any(i["id"] == item["id"] for i in ended.structured_content["items"])

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("progress", [True, False], ids=["follow", "long-poll"])
def test_an_orchestrators_events_wait_returns_when_the_turn_starts_to_wait_for_input(relay, mode, progress):
    """An orchestrator starts a session and waits on its events (25 s, the longest): the wait
    returns because the turn waits for input, with the item to answer; the answer through the
    `inbox` tool lets the agent go on, and the turn runs to its end."""
    token = relay.token(f"orch-{mode}-{progress}")
    name = f"orch-{mode}-{int(progress)}-{time.monotonic_ns()}"

    async def main():
        async with connect(relay, token, mode) as c:
            started = await c.call_tool(
                "session", {"action": "start", "name": name, "sandbox": "default", "harness": "asker", "prompt": "go"}
            )
            assert not started.is_error, text(started)
            seen = []

            async def on_event(seq, total, message):
                seen.append(json.loads(message))

            since, page = 0, None
            with anyio.fail_after(60):
                # The long poll returns at each event: an orchestrator reads on until the state says.
                while page is None or page["state"] != "waiting_input":
                    args = {"action": "events", "session": name, "since": since, "wait_seconds": 25}
                    r = await c.call_tool("session", args, progress_callback=on_event if progress else None)
                    assert not r.is_error, text(r)
                    page = r.structured_content
                    since = page["next"]
                    assert page["state"] not in ("succeeded", "failed", "crashed", "cancelled", "timed_out"), page
                    if progress:
                        break
            # It returned because the turn waits for input, naming what it waits for.
            assert page["state"] == "waiting_input", page
            assert page["closed"] is None, page
            listed = await c.call_tool("inbox", {"action": "list"})
            asks = [i["id"] for i in listed.structured_content["items"] if i["session_name"] == name]
            assert page["waiting_for"] == asks and len(asks) == 1, (page, asks)
            moved = [e for e in page["events"] if e["type"] == "run.state"]
            assert moved[-1]["data"]["to"] == "waiting_input", page["events"]
            if progress:
                assert [e["seq"] for e in seen] == [e["seq"] for e in page["events"]]

            done = await c.call_tool("inbox", {"action": "answer", "item": page["waiting_for"][0], "answer": "sqlite"})
            assert not done.is_error, text(done)
            with anyio.fail_after(60):
                while True:
                    args = {"action": "events", "session": name, "since": since, "wait_seconds": 25}
                    r = await c.call_tool("session", args)
                    page = r.structured_content
                    since = page["next"]
                    if page["state"] == "succeeded" and not page["more"]:
                        break
            assert page["waiting_for"] == []

    anyio.run(main)
    assert "chose sqlite" in printed(relay, token, name)
