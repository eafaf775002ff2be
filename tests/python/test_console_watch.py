"""The console as a person watching agents uses it (issue 39), in a real headless Chromium: a unit's
page saying what the agent does (each turn's prompt, every event with its time, readable rows for
the start, usage and the result, the cost as an API-equivalent estimate), deciding a held call or
answering a question where it is shown, the worktree's diff, tiles that stay true (task, who, time
running, a badge that follows the turn, a settled unit kept a while), "Dismiss all" for failures,
the sign-in alone before signing in, live process lists, and every page at a phone's width without
sideways scrolling. Chromium as in test_console.py (CI=true: a missing one fails).
"""

import json
import time
from pathlib import Path

import httpx
import pytest

from test_console import FIXTURES, HOOKED, REPLAY, api, braces, browser, css, printed, sign_in, texts, wait  # noqa: F401
from test_mcp import ADMIN, Relay

# A message, then a question with options (the agent's text is HTML, shown as text).
SAID = """{"type":"assistant","message":{"id":"m1","role":"assistant","model":"claude-sonnet-5","content":[{"type":"text","text":"%s"}]}}"""
ASKS = (
    "cat >/dev/null; printf '%s\\n' '" + SAID % "The <b>schema</b> fits either: I need a choice." + "'; "
    'a=$("$HANGAR_AGENT" question "Which database?" --option postgres --option sqlite); echo "chose $a"; sleep 1'
)
# The same hook as test_console's, after a message that says why it wants the call.
HOLDS = HOOKED.replace(
    "cat >/dev/null\n", "cat >/dev/null\nprintf '%s\\n' '" + SAID % "Tests pass; pushing the release." + "'\n", 1
)
FAILS = "cat >/dev/null; echo nothing works >&2; exit 1"
# Edits its git worktree in two steps, a few seconds apart, then waits to be cancelled.
EDITS = (
    "cat >/dev/null; printf 'one more line\\n' >> README.md; sleep 3; "
    "printf 'fresh <file>\\n' > added.txt; sleep 60"
)
# Runs for a while, saying little: its turn stays `running`.
WAITS = "cat >/dev/null; sleep 8"


def harnesses(path: Path) -> Path:
    def argv(*a):
        return json.dumps([braces(x) for x in a])

    replay = FIXTURES / "claude-long-turn.jsonl"
    path.write_text(
        f"""
[harness.replay]
new = {argv("bash", "-c", REPLAY, "replay", str(replay))}
follow_up = {argv("bash", "-c", REPLAY, "replay", str(replay))}
format = "claude-stream-json"

[harness.slow]
new = {argv("bash", "-c", REPLAY.replace("sleep 0.2", "sleep 0.8"), "slow", str(replay))}
format = "claude-stream-json"

[harness.asks]
new = {argv("bash", "-c", ASKS)}
format = "claude-stream-json"

[harness.holds]
new = {argv("bash", "-c", HOLDS, "claude")}
format = "claude-stream-json"
approvals = ["--settings", "{{settings_file}}"]

[harness.fails]
new = {argv("bash", "-c", FAILS)}
format = "claude-stream-json"

[harness.edits]
new = {argv("bash", "-c", EDITS)}
format = "claude-stream-json"

[harness.waits]
new = {argv("bash", "-c", WAITS)}
format = "claude-stream-json"
"""
    )
    return path


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    r = Relay({"HANGAR_HARNESSES": str(harnesses(tmp_path_factory.mktemp("watch") / "h.toml"))})
    yield r
    r.stop()


def sandbox(relay, name):
    return api(relay, "POST", "/api/sandboxes", {"name": name, "provider": "local"})


def rows(driver, kind):
    """The `.what` texts of the unit page's events of one type."""
    return texts(driver, f".events .event[data-type='{kind}'] .what")


def test_before_sign_in_only_the_sign_in_is_shown(relay, browser):
    browser.get(f"{relay.url}/#/fleet")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait(browser, lambda d: css(d, "#token"))
    assert not css(browser, "#nav")[0].is_displayed()
    assert not css(browser, "#sign-out")[0].is_displayed()
    assert not css(browser, ".tiles")
    sign_in(browser, relay)
    wait(browser, lambda d: css(d, "#nav")[0].is_displayed())


def test_a_units_page_says_each_turns_prompt_its_events_times_and_readable_rows(relay, browser):
    sign_in(browser, relay)
    sandbox(relay, "reader")
    prompt = "Fix the <b>failing</b> tests\nthen commit"
    api(relay, "POST", "/api/sessions", {"name": "read-me", "sandbox": "reader", "harness": "replay", "prompt": prompt})
    browser.get(f"{relay.url}/#/unit/reader")
    # The turn's prompt heads its events, as text.
    head = wait(browser, lambda d: texts(d, ".events .turn-head .prompt"))
    assert head == [prompt], head
    assert not css(browser, ".events .turn-head b")
    # The start names the model; usage is tokens; the result is its state, turns and cost.
    started = wait(browser, lambda d: rows(d, "run.started"))
    assert "model claude-sonnet-5" in started[0], started
    result = wait(browser, lambda d: rows(d, "run.result"), timeout=40)
    assert result[0].startswith("ok (success), 14 turns"), result
    assert "≈ $0.4127 API-equivalent" in result[0], result
    usage = rows(browser, "usage")
    assert usage and "in 48" in usage[-1] and "out 3.9k" in usage[-1] and "≈ $0.4127" in usage[-1], usage
    cost_note = browser.execute_script(
        "return document.querySelector(\".event[data-type='run.result'] .cost\").title"
    )
    assert "API-equivalent" in cost_note, cost_note
    # No event is a blank row.
    blank = browser.execute_script(
        "return [...document.querySelectorAll('.events .event')].filter((e) => !e.querySelector('.what').textContent.trim()).map((e) => e.dataset.type)"
    )
    assert blank == [], blank
    # Every event says when: relative beside it, absolute on hover, and the relative one moves.
    times = browser.execute_script(
        "return [...document.querySelectorAll('.events .event')].map((e) => [e.querySelector('time.age')?.textContent, e.querySelector('time.age')?.title])"
    )
    assert times and all(t and t.endswith(" ago") and title for t, title in times), times
    first = lambda d: d.execute_script("return document.querySelector('.events .event time.age').textContent")  # noqa: E731
    before = first(browser)
    wait(browser, lambda d: first(d) != before, timeout=5)
    # A follow-up is a second turn, headed by its own prompt.
    api(relay, "POST", "/api/sessions/read-me/turns", {"prompt": "now the docs"})
    wait(browser, lambda d: texts(d, ".events .turn-head .prompt") == [prompt, "now the docs"], timeout=40)


def test_a_held_call_is_decided_on_the_units_page_after_what_the_agent_said(relay, browser):
    sign_in(browser, relay)
    sandbox(relay, "gate")
    api(relay, "POST", "/api/sessions", {
        "name": "release", "sandbox": "gate", "harness": "holds", "prompt": "ship it",
        "approvals": ["Bash(git push*)"],
    })
    browser.get(f"{relay.url}/#/unit/gate")
    card = wait(browser, lambda d: (css(d, ".session .asks article.kind-approval") or [None])[0])
    assert card.find_element("css selector", ".title").text == "Bash: git push origin main"
    assert card.find_element("css selector", ".before").text == "Tests pass; pushing the release."
    # The unit's badge says so, from the fleet stream.
    wait(browser, lambda d: texts(d, ".unit-line .badge.role-approval"))
    item = api(relay, "GET", "/api/inbox")["items"]
    held = next(i for i in item if i["kind"] == "approval" and i["session_name"] == "release")
    assert card.get_attribute("data-item") == held["id"]
    card.find_element("css selector", "input.reason").send_keys("looked at it")
    card.find_element("css selector", "button.deny").click()
    # The card goes, and the session's own events say how it ended, from the stream.
    wait(browser, lambda d: not css(d, ".session .asks article"))
    wait(browser, lambda d: any("denied" in t for t in rows(d, "inbox.ended")))
    line = wait(browser, lambda d: next((x for x in printed(relay, "release") if x.startswith("push:")), None))
    decision = json.loads(line[len("push:"):])["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert decision["permissionDecisionReason"].endswith("looked at it"), decision


def test_a_question_is_answered_in_free_text_on_the_units_page(relay, browser):
    sign_in(browser, relay)
    sandbox(relay, "asked")
    api(relay, "POST", "/api/sessions", {"name": "which-db", "sandbox": "asked", "harness": "asks", "prompt": "go"})
    browser.get(f"{relay.url}/#/unit/asked")
    card = wait(browser, lambda d: (css(d, ".session .asks article.kind-question") or [None])[0])
    # What the agent said before it asked is text, its markup shown, never made into elements.
    assert card.find_element("css selector", ".before").text == "The <b>schema</b> fits either: I need a choice."
    assert not css(browser, ".before b")
    assert [b.text for b in card.find_elements("css selector", "button.option")] == ["postgres", "sqlite"]
    card.find_element("css selector", "input.answer").send_keys("mysql, sorry")
    card.find_element("css selector", "button.send").click()
    wait(browser, lambda d: not css(d, ".session .asks article"))
    wait(browser, lambda d: "chose mysql, sorry" in printed(relay, "which-db"))


def test_a_tile_shows_the_work_who_time_and_cost_and_its_badge_follows_the_turn(relay, browser):
    sign_in(browser, relay)
    box = sandbox(relay, "tiled")
    browser.get(f"{relay.url}/#/fleet")
    wait(browser, lambda d: "live" in css(d, ".status")[0].text)
    api(relay, "POST", "/api/sessions", {"name": "tile-me", "sandbox": "tiled", "harness": "replay", "prompt": "Fix the config loader\nand more"})
    tile = f".tile[data-unit='{box['id']}']"
    wait(browser, lambda d: texts(d, f"{tile}.role-running"))
    assert texts(browser, f"{tile} .work") == ["Fix the config loader"]
    who = wait(browser, lambda d: [w for w in texts(d, f"{tile} .who") if "claude-sonnet-5" in w])
    assert who == ["tile-me · replay · claude-sonnet-5"], who
    # The time running moves without a reload.
    clock = lambda d: (texts(d, f"{tile} .run-time time") or [None])[0]  # noqa: E731
    start = wait(browser, clock)
    wait(browser, lambda d: clock(d) not in (None, start), timeout=5)
    cost = wait(browser, lambda d: texts(d, f"{tile} .cost"), timeout=40)
    assert cost[0].startswith("≈ $"), cost
    assert "API-equivalent" in browser.execute_script(f"return document.querySelector(\"{tile} .cost\").title")
    # Once the turn succeeds the badge says so without a reload, and the settled tile stays, dimmed.
    wait(browser, lambda d: texts(d, f"{tile}.role-off.settled"), timeout=40)
    assert texts(browser, f"{tile} .badge.role-off")
    # Its unit page's badge follows the fleet stream too.
    browser.get(f"{relay.url}/#/unit/tiled")
    wait(browser, lambda d: texts(d, ".unit-line .badge.role-off"))


def test_a_units_badge_on_its_page_moves_from_running_to_settled_live(relay, browser):
    sign_in(browser, relay)
    sandbox(relay, "badged")
    api(relay, "POST", "/api/sessions", {"name": "badge-me", "sandbox": "badged", "harness": "waits", "prompt": "wait"})
    browser.get(f"{relay.url}/#/unit/badged")
    wait(browser, lambda d: texts(d, ".unit-line .badge.role-running"))
    wait(browser, lambda d: texts(d, ".unit-line .badge.role-off"), timeout=30)
    assert not texts(browser, ".unit-line .badge.role-queued, .unit-line .badge.role-running")


def test_an_estimate_says_its_basis_and_samples_on_hover(relay, browser):
    sign_in(browser, relay)
    box = sandbox(relay, "estimated")
    browser.get(f"{relay.url}/#/fleet")
    api(relay, "POST", "/api/sessions", {"name": "est", "sandbox": "estimated", "harness": "replay", "prompt": "go"})
    tile = f".tile[data-unit='{box['id']}']"
    title = wait(browser, lambda d: d.execute_script(f"return document.querySelector(\"{tile} .estimate\")?.title"), timeout=30)
    assert "samples" in title or "sample" in title, title
    samples = browser.execute_script(f"return document.querySelector(\"{tile} .estimate\")?.dataset.samples")
    assert samples is not None and samples.isdigit(), samples


def test_failures_are_dismissed_all_at_once(relay, browser):
    sign_in(browser, relay)
    for name in ("broken-1", "broken-2"):
        sandbox(relay, name)
        api(relay, "POST", "/api/sessions", {"name": name, "sandbox": name, "harness": "fails", "prompt": "go"})
    browser.get(f"{relay.url}/#/inbox")
    wait(browser, lambda d: len(css(d, "article.kind-failed")) >= 2, timeout=30)
    css(browser, "button.ack-all")[0].click()
    wait(browser, lambda d: not css(d, "article.kind-failed"))
    assert not css(browser, "button.ack-all")
    assert api(relay, "GET", "/api/inbox")["counts"]["failed"] == 0


def test_the_process_list_stays_current_without_a_refresh(relay, browser):
    sign_in(browser, relay)
    sandbox(relay, "procs")
    browser.get(f"{relay.url}/#/unit/procs")
    wait(browser, lambda d: texts(d, ".plist li"))
    # Started elsewhere (the API, as the CLI would): the open page lists it, then sees it end.
    # It runs until told to stop, so the page is sure to see it running first.
    p = api(relay, "POST", "/api/sandboxes/procs/processes", {"command": "until [ -e stop-now ]; do sleep 0.2; done"})
    row = f".plist li[data-process='{p['process_id']}']"
    state = lambda d: d.execute_script(f"return document.querySelector(\"{row}\")?.dataset.state")  # noqa: E731
    wait(browser, lambda d: state(d) == "running")
    api(relay, "POST", "/api/sandboxes/procs/exec", {"command": "touch stop-now"})
    wait(browser, lambda d: state(d) == "exited")
    assert not css(browser, ".processes button.refresh")


def test_the_diff_is_listed_live_and_a_files_hunks_open_on_a_click(relay, browser):
    """Needs `GET /api/sessions/{id}/diff` (issue 39, built beside this page)."""
    sign_in(browser, relay)
    sandbox(relay, "differ")
    r = api(relay, "POST", "/api/sandboxes/differ/exec", {
        "command": "git init -q && printf 'first\\nsecond\\n' > README.md && git add README.md && "
                   "git -c user.email=t@example.com -c user.name=t commit -qm init && echo ok"})
    assert "ok" in r["stdout"], r
    api(relay, "POST", "/api/sessions", {"name": "diffed", "sandbox": "differ", "harness": "edits", "prompt": "edit"})
    browser.get(f"{relay.url}/#/unit/differ")
    try:
        listed = lambda d: texts(d, ".diff-files button.file .path")  # noqa: E731
        wait(browser, lambda d: "README.md" in listed(d), timeout=20)
        counts = texts(browser, ".diff-files li .counts")
        assert counts and counts[0].replace("\u2212", "-") == "+1 -0", counts
        # The second edit arrives while the turn runs, without a reload.
        wait(browser, lambda d: "added.txt" in listed(d), timeout=20)
        assert "added" in texts(browser, ".diff-files .badge.change-added")
        # A file's hunks, drawn as text, added lines by their class.
        browser.execute_script(
            "[...document.querySelectorAll('.diff-files button.file')].find((b) => b.dataset.path === 'added.txt').click()"
        )
        added = wait(browser, lambda d: texts(d, ".patch .hunks .line.add"))
        assert "+fresh <file>\n" in added, added
        assert not css(browser, ".patch file")
        readme = browser.execute_script(
            "[...document.querySelectorAll('.diff-files button.file')].find((b) => b.dataset.path === 'README.md').click()"
        )
        del readme
        wait(browser, lambda d: "+one more line\n" in texts(d, ".patch .hunks .line.add"))
        assert texts(browser, ".patch .hunks .line.hunk")
    finally:
        httpx.post(f"{relay.url}/api/sessions/diffed/cancel", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)


@pytest.mark.parametrize("size", [(390, 844), (1400, 900)])
def test_no_page_scrolls_sideways_on_a_phone_or_a_wide_screen(relay, browser, size):
    sign_in(browser, relay)
    sandbox(relay, f"wide-{size[0]}")
    api(relay, "POST", "/api/sessions", {
        "name": f"wide-{size[0]}", "sandbox": f"wide-{size[0]}", "harness": "replay",
        "prompt": "a/very/long/path/" * 20,
    })
    browser.set_window_size(*size)
    try:
        for page in ("#/fleet", "#/inbox", f"#/unit/wide-{size[0]}"):
            browser.get(f"{relay.url}/{page}")
            wait(browser, lambda d: css(d, ".tile, .deck, .card, .empty, .events .event"))
            time.sleep(1)  # the page's later reads (sessions, processes) arrive; there is no one event for "all"
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{page} at {size[0]}px scrolls sideways by {overflow}px"
    finally:
        browser.set_window_size(1280, 900)


def test_tiles_fill_a_wide_screen(relay, browser):
    sign_in(browser, relay)
    for n in range(4):
        sandbox(relay, f"grid-{n}")
    browser.set_window_size(1400, 900)
    try:
        browser.get(f"{relay.url}/#/fleet")
        wait(browser, lambda d: len(css(d, ".tile")) >= 4)
        tops = browser.execute_script(
            "return [...document.querySelectorAll('.tile')].slice(0, 4).map((t) => t.getBoundingClientRect().top)"
        )
        # Several tiles side by side, beside the column of what needs you.
        assert len({round(t) for t in tops}) < 4, tops
        right = browser.execute_script(
            "return Math.max(...[...document.querySelectorAll('.tile, .deck-box')].map((t) => t.getBoundingClientRect().right))"
        )
        assert right > 1400 * 0.9, right
    finally:
        browser.set_window_size(1280, 900)
