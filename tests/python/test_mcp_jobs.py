"""Jobs over MCP: the `job` tool and the `hangar://jobs/<id>/events` resource, driven by the
official Python MCP SDK in both protocol modes (see test_mcp.py), against the real relay with
harness profiles that stand in for an agent: `worker` commits in its directory and reports a PR
URL in its final message, `sleeper` runs until it is cancelled.
"""

import json
import time

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from test_mcp import MODES, Relay, connect, text

# The 2025-era calls (resources/subscribe) are deprecated in the SDK; testing them is the point.
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

PR = "https://github.com/acme/shipper/pull/42"
RESULT = json.dumps(
    {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "result": f"Done. Opened {PR} for review."}
)
WORKER = f"cat >/dev/null; git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m work; echo '{RESULT}'"
AGENT_TEXT = "hangar/agent_text"
EVENTS_META = {AGENT_TEXT: ["events[].data"]}
TERMINAL = {"succeeded", "failed", "cancelled"}


def braces(s: str) -> str:
    """Braces as a harness argv writes them (single ones are placeholders)."""
    return s.replace("{", "{{").replace("}", "}}")


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    path = tmp_path_factory.mktemp("job-harnesses") / "harnesses.toml"
    path.write_text(
        f"""
[harness.worker]
new = {json.dumps(["bash", "-c", braces(WORKER)])}
format = "claude-stream-json"
session_ids = "none"

[harness.sleeper]
new = {json.dumps(["bash", "-c", "cat >/dev/null; exec sleep 60"])}
format = "claude-stream-json"
session_ids = "none"
"""
    )
    r = Relay({"HANGAR_HARNESSES": str(path), "HANGAR_SESSION_POLL_SECONDS": "0.3"})
    yield r
    r.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


async def job(c, **args):
    """Calls `job`, asserting it succeeded; the result."""
    r = await c.call_tool("job", args)
    assert not r.is_error, text(r)
    return r


async def repo(c) -> tuple[str, str]:
    """A git repository with one commit on `main` in a new directory of the default sandbox:
    the directory (relative to the sandbox's working directory) and its head."""
    d = unique("repo")
    cmd = f"mkdir {d} && cd {d} && git init -q -b main && git -c user.email=a@b -c user.name=t commit -q --allow-empty -m base && git rev-parse HEAD"
    r = await c.call_tool("exec", {"sandbox": "default", "command": cmd})
    assert not r.is_error and r.structured_content["exit_code"] == 0, text(r)
    return d, r.structured_content["stdout"].strip()


async def wait_state(c, id: str, want: set, timeout: float = 40) -> dict:
    with anyio.fail_after(timeout):
        while True:
            j = (await job(c, action="status", job=id)).structured_content
            if j["state"] in want:
                return j
            await anyio.sleep(0.2)


async def read_events(c, uri: str) -> dict:
    r = await c.read_resource(uri)
    assert r.contents[0].meta == EVENTS_META, r.contents[0].meta
    return json.loads(r.contents[0].text)


def ends_job(e: dict) -> bool:
    return e["type"] == "job.state" and e["data"]["source"] == "hangar" and e["data"]["to"] in TERMINAL


@pytest.mark.parametrize("mode", MODES)
def test_a_job_runs_to_succeeded_with_what_hangar_measured_and_its_events_are_read_with_since(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"jobs-{mode}"), mode) as c:
            d, base = await repo(c)
            started = await job(
                c, action="start", sandbox="default", harness="worker", prompt="add the feature", cwd=d,
                verify="git log --oneline | wc -l; echo verified", idempotency_key=f"k-{mode}",
            )
            view = started.structured_content
            assert view["id"].startswith("job_") and view["state"] == "queued", view
            assert view["idempotent_replay"] is False
            # The one field holding the agent's word is named.
            assert started.meta[AGENT_TEXT] == ["result.pr_url"] == view["agent_text"]
            # The same key and prompt: the same job.
            again = (await job(c, action="start", sandbox="default", harness="worker", prompt="add the feature",
                               cwd=d, verify="git log --oneline | wc -l; echo verified",
                               idempotency_key=f"k-{mode}")).structured_content
            assert (again["id"], again["idempotent_replay"]) == (view["id"], True)

            j = await wait_state(c, view["id"], TERMINAL)
            assert (j["state"], j["reason"]) == ("succeeded", "ok"), j
            r = j["result"]
            assert r["measured_by"] == "hangar" and r["branch"] == "main" and r["base"] == base, r
            assert r["commits_ahead"] == 1 and r["dirty"] is False and r["head"] != base, r
            assert r["verification"]["exit_code"] == 0 and "verified" in r["verification"]["output_tail"], r
            assert (r["pr_url"], r["pr_url_source"]) == (PR, "agent_reported"), r
            status = await job(c, action="status", job=view["id"])
            assert status.meta[AGENT_TEXT] == ["result.pr_url"]

            listed = await job(c, action="list")
            assert [x["id"] for x in listed.structured_content["jobs"]] == [view["id"]]
            assert listed.meta[AGENT_TEXT] == ["jobs[].result.pr_url"]

            # The job's events: its session's, with hangar's job.state and job.result, the job's
            # end last.
            uri = f"hangar://jobs/{view['id']}/events"
            page = await read_events(c, uri)
            events = page["events"]
            assert (page["job"], page["state"], page["session"]) == (view["id"], "succeeded", j["session"]), page
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
            assert [e["data"]["to"] for e in events if e["type"] == "job.state"] == ["running", "verifying", "succeeded"]
            assert any(e["type"] == "job.result" and e["data"]["result"] == r for e in events), events
            assert any(e["type"] == "run.result" for e in events), events
            assert ends_job(events[-1]) and page["next"] == events[-1]["seq"] == j["events_cursor"]
            assert page["more"] is False and page["subscribed"] is False
            # With since: only newer ones.
            assert (await read_events(c, f"{uri}?since={page['next']}"))["events"] == []
            tail = await read_events(c, f"{uri}?since={page['next'] - 2}")
            assert tail["events"] == events[-2:]

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_a_subscription_to_a_job_gets_updates_until_the_job_has_ended(relay, mode):
    async def main():
        updates_tx, updates_rx = anyio.create_memory_object_stream(1000)

        async def on_message(msg):
            # A listen stream's updates come to the message handler too: counted once, from
            # the subscription.
            if mode == "legacy" and getattr(msg, "method", None) == "notifications/resources/updated":
                await updates_tx.send(msg.params.uri)

        token = relay.token(f"sub-{mode}")
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0))
        async with http, Client(
            streamable_http_client(f"{relay.url}/mcp", http_client=http), mode=mode, message_handler=on_message
        ) as c:
            templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
            assert "hangar://jobs/{job}/events" in templates
            d, _ = await repo(c)
            started = await job(c, action="start", sandbox="default", harness="worker", prompt="go", cwd=d,
                                verify="sleep 1")
            id = started.structured_content["id"]
            uri = f"hangar://jobs/{id}/events"
            seen = []
            updates = 0

            async def collect():
                # Each update says there is more to read from where the last read ended.
                nonlocal updates
                nxt = 0
                with anyio.fail_after(40):
                    while not (seen and ends_job(seen[-1])):
                        assert await updates_rx.receive() == uri
                        updates += 1
                        page = await read_events(c, f"{uri}?since={nxt}")
                        assert page["job"] == id and all(e["seq"] > nxt for e in page["events"]), page
                        seen.extend(page["events"])
                        nxt = page["next"]

            if mode == "legacy":
                await c.subscribe_resource(uri)
                await collect()
                await c.unsubscribe_resource(uri)
            else:
                ended = anyio.Event()

                async def pump(sub):
                    async for ev in sub:
                        await updates_tx.send(ev.uri)
                    # The relay ended the subscription (its final result) once the job had.
                    ended.set()

                async with c.listen(resource_subscriptions=[uri]) as sub:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(pump, sub)
                        await collect()
                        with anyio.fail_after(10):
                            await ended.wait()

            assert updates >= 2, updates
            seqs = [e["seq"] for e in seen]
            assert seqs == list(range(seqs[0], seqs[-1] + 1)), seqs
            kinds = [e["type"] for e in seen]
            assert "job.result" in kinds and [e["data"]["to"] for e in seen if e["type"] == "job.state"][-1] == "succeeded"

    anyio.run(main)
    assert 'hangar_streams{kind="mcp_events",reason="done"}' in relay.metrics()


@pytest.mark.parametrize("mode", MODES)
def test_cancel_ends_a_running_job_cancelled(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"cancel-{mode}"), mode) as c:
            id = (await job(c, action="start", sandbox="default", harness="sleeper", prompt="wait")).structured_content["id"]
            running = await wait_state(c, id, {"running"} | TERMINAL)
            assert running["state"] == "running" and running["session"], running
            await job(c, action="cancel", job=id)
            j = await wait_state(c, id, TERMINAL)
            assert j["state"] == "cancelled", j
            # Cancelling again answers the ended job.
            assert (await job(c, action="cancel", job=id)).structured_content["state"] == "cancelled"
            events = (await read_events(c, f"hangar://jobs/{id}/events"))["events"]
            assert ends_job(events[-1]) and events[-1]["data"]["to"] == "cancelled", events[-1]

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_bad_job_arguments_are_clear_errors_and_another_persons_job_is_not_found(relay, mode):
    async def main():
        async with connect(relay, relay.token(f"badjob-{mode}"), mode) as c:
            mine = (await job(c, action="start", sandbox="default", harness="sleeper", prompt="x")).structured_content["id"]
            cases = [
                ({"action": "explode"}, "unknown variant `explode`"),
                ({}, "missing field `action`"),
                ({"action": "start", "sandbox": "default", "harness": "worker"}, 'prompt is required for action "start"'),
                ({"action": "status"}, 'job is required for action "status"'),
                ({"action": "cancel"}, 'job is required for action "cancel"'),
                ({"action": "status", "job": mine, "prompt": "hi"}, 'prompt does not apply to action "status"'),
                ({"action": "list", "job": mine}, 'job does not apply to action "list" (it takes no other arguments)'),
                ({"action": "start", "job": mine, "prompt": "x", "sandbox": "default"}, 'job does not apply to action "start"'),
                ({"action": "list", "colour": "red"}, "unknown field `colour`"),
                ({"action": "status", "job": "job_nope"}, 'not_found: no job "job_nope"'),
                ({"action": "start", "harness": "worker", "prompt": "x"}, "exactly one of sandbox"),
                ({"action": "start", "sandbox": "default", "sandbox_spec": {"provider": "local"}, "prompt": "x"}, "exactly one of sandbox"),
                ({"action": "start", "sandbox_spec": {"provider": "nope"}, "harness": "worker", "prompt": "x"}, "provider"),
                ({"action": "start", "sandbox_spec": {"provider": "local", "size": 1}, "prompt": "x"}, "unknown field `size`"),
                ({"action": "start", "sandbox": "default", "harness": "nope", "prompt": "x"}, 'harness "nope"'),
                ({"action": "start", "sandbox": "default", "harness": "worker", "prompt": " "}, "prompt: must not be empty"),
                ({"action": "start", "sandbox": "default", "harness": "worker", "prompt": "x", "timeout_minutes": 0}, "timeout_minutes: 0"),
                ({"action": "start", "sandbox": "default", "harness": "worker", "prompt": "x", "verify": ""}, "verify: a shell command"),
                ({"action": "start", "sandbox": "nowhere", "harness": "worker", "prompt": "x"}, "not_found"),
                # Secrets and credentials as for a session: an unusable secret, a missing credential.
                ({"action": "start", "sandbox": "default", "harness": "worker", "prompt": "x", "secrets": ["NO_SUCH_KEY"]},
                 'no secret "NO_SUCH_KEY"'),
                ({"action": "start", "sandbox": "default", "prompt": "x"}, "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"),
            ]
            out = [(await c.call_tool("job", args), want) for args, want in cases]
            # Another token's person does not see the job.
            async with connect(relay, relay.token(f"otherjob-{mode}"), mode) as other:
                for action in ("status", "cancel"):
                    out.append((await other.call_tool("job", {"action": action, "job": mine}), f'not_found: no job "{mine}"'))
                assert (await job(other, action="list")).structured_content["jobs"] == []
                with pytest.raises(MCPError, match="no job"):
                    await other.read_resource(f"hangar://jobs/{mine}/events")
                if mode == "legacy":
                    with pytest.raises(MCPError, match="no job"):
                        await other.subscribe_resource(f"hangar://jobs/{mine}/events")
            for bad, want in [
                ("hangar://jobs/a/b/events", "not a job id"),
                ("hangar://jobs/job.1/events", "not a job id"),
                (f"hangar://jobs/{mine}/events?since=x", "since \"x\": an event's seq"),
                (f"hangar://jobs/{mine}/events?colour=red", "unknown field `colour`"),
                (f"hangar://jobs/{mine}/result", "unknown resource"),
            ]:
                with pytest.raises(MCPError, match=want):
                    await c.read_resource(bad)
            # Nothing was created by the refused starts.
            assert [j["id"] for j in (await job(c, action="list")).structured_content["jobs"]] == [mine]
            await job(c, action="cancel", job=mine)
            return out

    for r, want in anyio.run(main):
        assert r.is_error and want in text(r), (want, text(r))
        assert r.structured_content["error"]["code"], r.structured_content


def test_a_jobs_token_cannot_use_mcp(relay):
    token = relay.token("pipeline", "jobs")
    r = httpx.post(
        f"{relay.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 403, r.text
