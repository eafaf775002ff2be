"""The web console as a person uses it, in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by the pinned Selenium): signing in, the Needs-you page answering an
agent's question and approving its held tool call (the agent goes on), a unit's page with its
session's events, a streamed command, a background process's output and a directory watch, and
an agent's text shown as text. Under CI=true a missing Chromium is a failure; elsewhere these
tests are skipped with the reason.
"""

import json
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from test_mcp import ADMIN, Relay

CHROMIUM = os.environ.get("HANGAR_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("HANGAR_CHROMEDRIVER", "/usr/bin/chromedriver")
FIXTURES = Path(__file__).resolve().parents[2] / "agents" / "fixtures"
WAIT = 20

# Asks a question (its text is HTML, which the page must show as text) and says what it chose.
ASKER = (
    'cat >/dev/null; a=$("$HANGAR_AGENT" question "<img src=x id=injected> Which database?" '
    '--option postgres --option sqlite); echo "chose $a"; sleep 1'
)
# Claude Code as far as hooks go (see tests/tests/relay_inbox.rs): runs the PreToolUse hook from
# the settings file hangar passes with --settings, for one held call, and prints its decision.
HOOKED = r"""cat >/dev/null
s=; while [ $# -gt 0 ]; do [ "$1" = --settings ] && s=$2; shift; done
cmd=$(sed -n 's/.*"command":"\(.*\)","timeout".*/\1/p' "$s")
out=$(printf '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"git push origin main"},"tool_use_id":"t1"}' | eval "$cmd")
echo "push:$out"
sleep 1"""
REPLAY = "cat >/dev/null; while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.2; done < \"$1\""


def braces(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def harnesses(path: Path) -> Path:
    def argv(*a):
        return json.dumps([braces(x) for x in a])

    path.write_text(
        f"""
[harness.asker]
new = {argv("bash", "-c", ASKER)}
format = "claude-stream-json"

[harness.hooked]
new = {argv("bash", "-c", HOOKED, "claude")}
format = "claude-stream-json"
approvals = ["--settings", "{{settings_file}}"]

[harness.replay]
new = {argv("bash", "-c", REPLAY, "replay", str(FIXTURES / "claude-long-turn.jsonl"))}
format = "claude-stream-json"

[harness.slow]
new = {argv("bash", "-c", REPLAY.replace("sleep 0.2", "sleep 0.4"), "slow", str(FIXTURES / "claude-long-turn.jsonl"))}
format = "claude-stream-json"
"""
    )
    return path


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    r = Relay({"HANGAR_HARNESSES": str(harnesses(tmp_path_factory.mktemp("console") / "h.toml"))})
    yield r
    r.stop()


@pytest.fixture(scope="module")
def browser():
    missing = [p for p in (CHROMIUM, DRIVER) if not shutil.which(p)]
    if missing:
        why = f"Chromium is not installed ({', '.join(missing)}): apt-get install chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI=true requires it", pytrace=False)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


def api(relay, method, path, body=None, token=ADMIN):
    r = httpx.request(method, f"{relay.url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
    return r.json() if r.content else None


def wait(driver, what, timeout=WAIT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: what(d))


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def texts(driver, selector):
    """The texts of what `selector` finds, read at one instant (the Fleet redraws its tiles as
    they change, so elements found a moment ago may be gone)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)", selector
    )


def sign_in(driver, relay, token=ADMIN):
    driver.get(f"{relay.url}/#/fleet")
    driver.execute_script("sessionStorage.clear()")
    # A new document (a fragment change alone would not load the page again).
    driver.refresh()
    field = wait(driver, lambda d: (css(d, "#token") or [None])[0])
    field.send_keys(token)
    css(driver, "#sign-in")[0].click()


def printed(relay, session):
    events = api(relay, "GET", f"/api/sessions/{session}/events?limit=1000")["events"]
    return [e["data"].get("raw") for e in events if e["data"].get("raw")]


def test_signing_in_keeps_the_token_out_of_the_url_and_a_bad_token_says_why(relay, browser):
    sign_in(browser, relay, "hgr_not_a_token")
    alert = wait(browser, lambda d: (css(d, ".sign-in .error") or [None])[0])
    assert "token" in alert.text or "Bearer" in alert.text, alert.text
    jobs = relay.token("pipeline", "jobs")
    sign_in(browser, relay, jobs)
    alert = wait(browser, lambda d: (css(d, ".sign-in .error") or [None])[0])
    assert "scope" in alert.text, alert.text

    sign_in(browser, relay)
    wait(browser, lambda d: not d.find_element("id", "nav").get_attribute("hidden"))
    assert ADMIN not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('hangar.token')") == ADMIN
    assert browser.execute_script("return localStorage.getItem('hangar.token')") is None
    # Signing out forgets it.
    css(browser, "#sign-out")[0].click()
    wait(browser, lambda d: css(d, "#token"))
    assert browser.execute_script("return sessionStorage.getItem('hangar.token')") is None


def test_a_question_is_answered_with_its_option_and_the_agent_goes_on(relay, browser):
    sign_in(browser, relay)
    api(relay, "POST", "/api/sessions", {"name": "pick-db", "sandbox": "default", "harness": "asker", "prompt": "go"})
    browser.get(f"{relay.url}/#/inbox")
    card = wait(browser, lambda d: (css(d, "article.kind-question") or [None])[0])
    title = card.find_element("css selector", ".text")
    # The agent's text is text: its markup is shown, never made into elements.
    assert title.text == "<img src=x id=injected> Which database?"
    assert not css(browser, "#injected")
    options = [b.text for b in card.find_elements("css selector", "button.option")]
    assert options == ["postgres", "sqlite"]
    card.find_element("css selector", "button.option").click()
    wait(browser, lambda d: not css(d, "article.kind-question"))
    wait(browser, lambda d: "chose postgres" in printed(relay, "pick-db"))


def test_a_held_tool_call_is_approved_from_needs_you_and_the_agent_goes_on(relay, browser):
    sign_in(browser, relay)
    api(relay, "POST", "/api/sessions", {
        "name": "gated", "sandbox": "default", "harness": "hooked", "prompt": "ship it",
        "approvals": ["Bash(git push*)"],
    })
    browser.get(f"{relay.url}/#/inbox")
    card = wait(browser, lambda d: (css(d, "article.kind-approval") or [None])[0])
    assert card.find_element("css selector", ".title").text == "Bash: git push origin main"
    assert "git push origin main" in card.find_element("css selector", ".tool").text
    # The header counts what waits on you.
    wait(browser, lambda d: d.find_element("id", "inbox-count").text == "1")
    card.find_element("css selector", "input.reason").send_keys("reviewed")
    card.find_element("css selector", "button.allow").click()
    wait(browser, lambda d: not css(d, "article.kind-approval"))
    line = wait(browser, lambda d: next((l for l in printed(relay, "gated") if l.startswith("push:")), None))
    decision = json.loads(line[len("push:"):])["hookSpecificOutput"]
    assert (decision["permissionDecision"], decision["permissionDecisionReason"]) == ("allow", "reviewed")


def test_an_action_the_relay_refuses_says_why(relay, browser):
    sign_in(browser, relay)
    api(relay, "POST", "/api/sandboxes", {"name": "napping", "provider": "local"})
    api(relay, "POST", "/api/sandboxes/napping/pause")
    browser.get(f"{relay.url}/#/unit/napping")
    box = wait(browser, lambda d: (css(d, ".command-input") or [None])[0])
    box.send_keys("echo hi")
    css(browser, "button.run")[0].click()
    err = wait(browser, lambda d: texts(d, ".command .error"))
    assert "paused" in err[0], err
    api(relay, "POST", "/api/sandboxes/napping/resume")


def test_the_fleet_shows_an_agents_tile_changing_live_and_its_ask_on_the_deck(relay, browser):
    sign_in(browser, relay)
    sandbox = api(relay, "POST", "/api/sandboxes", {"name": "watched", "provider": "local"})
    browser.get(f"{relay.url}/#/fleet")
    wait(browser, lambda d: "live" in css(d, ".status")[0].text)
    api(relay, "POST", "/api/sessions", {"name": "slowly", "sandbox": "watched", "harness": "slow", "prompt": "go"})
    tile = f".tile[data-unit='{sandbox['id']}']"
    wait(browser, lambda d: texts(d, f"{tile}.role-running"))
    assert texts(browser, f"{tile} .name") == ["watched"]
    assert texts(browser, f"{tile} .short") == ["HGR-" + sandbox["id"][-4:].upper()]
    # What the agent does now, and its stage, change as its events are recorded: live, no reload.
    seen = set()
    stages = set()

    def moved(d):
        seen.update(texts(d, f"{tile} .now"))
        stages.update(texts(d, f"{tile} .stage-line .badge"))
        return len(seen) >= 3 and stages and texts(d, f"{tile} .stages .stage")

    wait(browser, moved, timeout=30)
    assert stages <= {"plan", "edit", "test", "pr"}, stages
    # An agent's ask reaches the deck atop the Fleet, and its unit's role.
    api(relay, "POST", "/api/sandboxes", {"name": "asking", "provider": "local"})
    api(relay, "POST", "/api/sessions", {"name": "asks-fleet", "sandbox": "asking", "harness": "asker", "prompt": "go"})
    wait(browser, lambda d: texts(d, ".deck-box article.kind-question"))
    wait(browser, lambda d: any(c.startswith("approval 1") or c.startswith("question") for c in texts(d, ".counts .chip"))
         or texts(d, ".tile.role-approval, .tile.role-question"))


def test_a_units_page_shows_its_events_a_streamed_command_a_process_and_its_files(relay, browser):
    sign_in(browser, relay)
    api(relay, "POST", "/api/sessions", {"name": "replayed", "sandbox": "default", "harness": "replay", "prompt": "go"})
    browser.get(f"{relay.url}/#/unit/default")
    # The latest session's events arrive live, tool calls one line each.
    wait(browser, lambda d: any(e.get_attribute("data-type") == "tool.start" for e in css(d, ".events .event")))
    assert css(browser, ".session-head .name")[0].text == "replayed"

    box = css(browser, ".command-input")[0]
    box.send_keys("echo streamed-out; echo to-err >&2; exit 3")
    css(browser, "button.run")[0].click()
    out = wait(browser, lambda d: (lambda t: t if "[exit 3]" in t else None)(css(d, ".command .output")[0].text))
    assert "streamed-out" in out and "to-err" in out

    box.clear()
    box.send_keys("for i in 1 2 3; do echo tick $i; sleep 0.3; done; touch made-by-console")
    css(browser, "button.background")[0].click()
    attach = wait(browser, lambda d: (css(d, ".plist button.attach") or [None])[0])
    attach.click()
    wait(browser, lambda d: "[exit status 0]" in css(d, ".processes .output")[0].text)
    assert "tick 1" in css(browser, ".processes .output")[0].text
    wait(browser, lambda d: any("made-by-console" in li.text for li in css(d, ".changes li")))


def test_the_theme_switches_and_is_kept(relay, browser):
    sign_in(browser, relay)
    browser.execute_script("localStorage.removeItem('hangar.theme')")
    browser.refresh()
    background = lambda d: d.execute_script("return getComputedStyle(document.body).backgroundColor")
    before = background(browser)
    css(browser, "#theme")[0].click()
    wait(browser, lambda d: background(d) != before)
    chosen = browser.execute_script("return document.documentElement.dataset.theme")
    assert chosen in ("dark", "light")
    browser.refresh()
    wait(browser, lambda d: d.execute_script("return document.documentElement.dataset.theme") == chosen)
    assert background(browser) != before
    browser.execute_script("localStorage.removeItem('hangar.theme')")


@pytest.mark.parametrize("width", [390, 1280])
def test_the_pages_fit_a_phone_and_a_wide_screen(relay, browser, width):
    sign_in(browser, relay)
    browser.set_window_size(width, 900)
    try:
        for page in ("#/fleet", "#/inbox", "#/unit/default"):
            browser.get(f"{relay.url}/{page}")
            time.sleep(0.5)
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{page} at {width}px scrolls sideways by {overflow}px"
    finally:
        browser.set_window_size(1280, 900)
