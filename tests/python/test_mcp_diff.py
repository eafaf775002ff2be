"""A session's diff over MCP: the `session` tool's `diff` action, driven by the official Python MCP
SDK in both protocol modes (see test_mcp.py), against the real relay with a harness profile that
changes a git repository in the default sandbox. The SDK holds each result to the tool's output
schema; the paths and the patch are named as the agent's text.
"""

import json
import time
from pathlib import Path

import anyio
import httpx
import pytest

from test_mcp import ADMIN, MODES, Relay, connect, text

AGENT_TEXT = "hangar/agent_text"
WORK = "cat > /dev/null; printf 'a\\nB\\nc\\n' > f.txt; echo new > added.txt; rm gone.txt"


def harnesses(path: Path) -> Path:
    path.write_text(
        f"""
[harness.worker]
new = {json.dumps(["bash", "-c", WORK])}
format = "text"
session_ids = "none"
"""
    )
    return path


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    r = Relay({"HANGAR_HARNESSES": str(harnesses(tmp_path_factory.mktemp("diff") / "harnesses.toml"))})
    yield r
    r.stop()


def exec_(relay: Relay, command: str) -> str:
    r = httpx.post(
        f"{relay.url}/api/sandboxes/default/exec",
        headers={"Authorization": f"Bearer {ADMIN}"},
        json={"command": command},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    return r.json()["stdout"]


async def call(c, **args):
    r = await c.call_tool("session", args)
    assert not r.is_error, text(r)
    return r


@pytest.mark.parametrize("mode", MODES)
def test_the_diff_action_lists_the_changes_and_gives_a_files_patch(relay, mode):
    d = f"w-{mode}-{time.monotonic_ns()}"
    base = exec_(
        relay,
        f"mkdir {d} && cd {d} && git init -q && printf 'a\\nb\\nc\\n' > f.txt && echo x > gone.txt && git add . && "
        "git -c user.email=a@b -c user.name=t commit -qm base && git rev-parse HEAD",
    ).strip()
    name = f"diff-{mode}-{time.monotonic_ns()}"

    async def main():
        async with connect(relay, relay.token(f"diff-{mode}"), mode) as c:
            await call(c, action="start", name=name, sandbox="default", harness="worker", prompt="go", cwd=d)
            with anyio.fail_after(30):
                while (await call(c, action="status", session=name)).structured_content["state"] != "succeeded":
                    await anyio.sleep(0.2)
            r = await call(c, action="diff", session=name)
            v = r.structured_content
            assert v["repository"] is True and v["base"] == base and v["turn"] == 1, v
            files = {f["path"]: (f["status"], f["added"], f["removed"]) for f in v["files"]}
            assert files == {"f.txt": ("modified", 1, 1), "added.txt": ("added", 1, 0), "gone.txt": ("deleted", 0, 1)}
            assert v["totals"] == {"files": 3, "added": 2, "removed": 2} and v["truncated"] is None
            assert r.meta[AGENT_TEXT] == ["files[].path", "files[].old_path", "path", "patch"]

            p = (await call(c, action="diff", session=name, path="f.txt")).structured_content
            assert p["path"] == "f.txt" and "-b\n+B\n" in p["patch"] and p["truncated"] is None, p

            bad = await c.call_tool("session", {"action": "diff", "session": name, "path": "../x"})
            assert bad.is_error and text(bad).startswith("invalid_argument: "), text(bad)

        # Another person's token: no such session.
        async with connect(relay, relay.token(f"other-{mode}"), mode) as c:
            r = await c.call_tool("session", {"action": "diff", "session": name})
            assert r.is_error and text(r).startswith("not_found: "), text(r)
            assert "f.txt" not in text(r)

    anyio.run(main)
