"""``agentenv view`` in a real headless Chromium: pages load clean, filters narrow the table, an episode shows its
calls and scores, a transcript's script never runs, and only the printed URL's token gets in."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.viewer.support import HOSTILE, console_errors, follow

SHOTS = os.environ.get("AGENTENV_VIEWER_SHOTS")  # a folder: the pages' screenshots are saved there (docs/images)


def shot(browser, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / f"viewer-{name}.png"))


def rows(browser) -> list[dict[str, str]]:
    out = []
    for tr in browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr"):
        cells = tr.find_elements(By.TAG_NAME, "td")
        out.append(
            {"task": cells[2].text, "outcome": cells[4].text, "reward": cells[5].text, "attempts": cells[6].text}
        )
    return out


def test_the_episodes_page_loads_clean_and_the_filters_narrow_the_table(records, viewer, browser):
    view = viewer(records)
    browser.get(view.url)
    console_errors(browser)
    assert len(rows(browser)) == 5
    shot(browser, "episodes")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("failed")
    follow(browser, browser.find_element(By.ID, "apply"))
    assert rows(browser) == [{"task": "deploy-fails", "outcome": "failed", "reward": "-", "attempts": "2"}]
    browser.get(view.url + "?replayed=1")
    assert [r["task"] for r in rows(browser)] == ["deploy-fails"]
    browser.get(view.url + "?task=echo&rmin=0.5")
    assert [(r["task"], r["reward"]) for r in rows(browser)] == [("echo", "1.000"), ("echo", "1.000")]
    browser.get(view.url + "?rmax=0.5")
    assert [r["reward"] for r in rows(browser)] == ["0.000"]
    assert browser.find_element(By.ID, "count").text == "1 of 5"
    assert console_errors(browser) == []


def test_an_episode_page_shows_its_tool_calls_scores_and_failures(records, viewer, browser):
    view = viewer(records)
    browser.get(view.url + "?task=two-turn")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr a"))
    calls = browser.find_elements(By.CSS_SELECTOR, ".call")
    assert [c.find_element(By.CSS_SELECTOR, ".tool").text for c in calls] == ["echo", "no_such_tool"] * 2
    assert "unknown tool" in calls[1].find_element(By.CSS_SELECTOR, ".answer").text
    assert "error" in calls[1].get_attribute("class")
    scores = [tr.text for tr in browser.find_elements(By.CSS_SELECTOR, "#scores tr.step")]
    assert len(scores) == 2 and all(s.endswith("1.000") for s in scores)
    assert browser.find_element(By.ID, "outcome").text == "scored"
    shot(browser, "episode")
    browser.get(view.url + "?task=deploy-fails")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr a"))
    failures = browser.find_element(By.ID, "failures").text
    assert failures.count("deploy") >= 4 and "(last)" in failures
    assert console_errors(browser) == []


def test_a_script_in_a_transcript_is_shown_as_text_and_never_runs(records, viewer, browser):
    view = viewer(records)
    browser.get(view.url + "?task=echo")
    links = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr a")
    hrefs = [a.get_attribute("href") for a in links]
    for href in hrefs:
        browser.get(href)
        if HOSTILE[:20] in browser.find_element(By.ID, "conversation").text:
            break
    else:
        raise AssertionError("no episode page shows the hostile transcript")
    answer = browser.find_element(By.CSS_SELECTOR, ".call .answer").text
    assert answer.startswith("<script>window.pwned = 1</script><img src=x onerror=")
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.find_elements(By.CSS_SELECTOR, "#conversation img, #conversation script") == []
    assert console_errors(browser) == []


def test_the_summary_page_draws_the_chart_the_kept_out_rate_and_the_comparison(records, viewer, browser):
    view = viewer(records, "--compare", records)
    browser.get(view.url + "summary")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart polyline.reward, #chart polyline.failed")
    kept = browser.find_element(By.ID, "kept-out")
    assert "20.0 %" in kept.text and "warning" in kept.get_attribute("class")
    tasks = {
        tr.find_element(By.CSS_SELECTOR, ".task").text
        for tr in browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
    }
    assert tasks == {"echo", "deploy-fails", "two-turn"}
    deltas = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#comparison td.delta")]
    assert deltas and all(d in ("+0.000", "-") for d in deltas)
    shot(browser, "summary")
    assert console_errors(browser) == []


def test_only_the_printed_token_gets_in(records, viewer):
    view = viewer(records)
    assert httpx.get(view.url, timeout=30).status_code == 200
    root = view.url.rsplit("/", 2)[0]
    assert httpx.get(root + "/", timeout=30).status_code == 404
    answer = httpx.get(root + "/not-the-token/", timeout=30)
    assert answer.status_code == 404 and "script-src" not in answer.headers["content-security-policy"]
    assert "default-src 'none'" in answer.headers["content-security-policy"]
