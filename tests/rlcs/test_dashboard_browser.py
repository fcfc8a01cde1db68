"""The dashboard's page in real Chromium through Playwright: every plot drawn from the run, the
item table's filters, a live run refreshing the page, and a run that has not started yet."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import curriculum_from_items, read_store
from rlcs.dashboard.reader import RunReader
from rlcs.data import Item

#: The README's screenshot is refreshed only on request (RLCS_UPDATE_SCREENSHOT=1), so that a
#: test run leaves the working tree as it found it.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "dashboard.png"
TOKEN = "s3cret-dashboard-token"  # the token of conftest.py's DashboardHarness
PLOTS = ["plot-tiers", "plot-passrate", "plot-expansion", "plot-valid", "plot-hist", "plot-sampled"]


def open_page(browser, url: str):
    """The page at ``url`` once its item table has loaded, and the list its script errors and
    console errors are collected into."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)
    return page, errors


@pytest.mark.slow
def test_page_renders_every_plot_and_the_table_filters(server, browser, run_dir, tmp_path_factory):
    page = browser.new_page(viewport={"width": 1440, "height": 1250})
    outside = []
    page.on("request", lambda r: None if r.url.startswith(server) else outside.append(r.url))
    page.goto(f"{server}/?token={TOKEN}&refresh=1")
    page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)
    for plot in PLOTS:
        page.wait_for_selector(f"#{plot} .main-svg", timeout=20_000)
    assert page.text_content("#iteration") == "40"
    # Every plot holds the run's data, not an empty frame.
    n_traces = page.evaluate("document.getElementById('plot-tiers').data.length")
    assert n_traces == 6  # five tiers and "unseen"
    xs = page.evaluate("document.getElementById('plot-expansion').data[1].x.length")
    assert xs == 40
    assert page.locator("#plot-tiers path.js-fill").count() >= 5
    assert page.locator("#plot-hist .point").count() >= 15
    hist = page.evaluate("document.getElementById('plot-hist').data[0].y")
    assert sum(hist) == sum(run_dir[1].histogram.tolist())
    assert page.locator("#plot-passrate .scatterlayer .trace").count() >= 5
    assert page.is_hidden("#fig-subcategories")  # its items name no subcategories
    assert page.is_hidden("#fig-heldout")  # nor does it evaluate on held-out items
    # the simulation's training figures, from metrics.jsonl
    page.wait_for_selector("#plot-reward .main-svg", timeout=20_000)
    reward = page.evaluate(
        "document.getElementById('plot-reward').data.map((t) => [t.name, t.x.length])"
    )
    assert reward == [["chart", 40], ["math", 40], ["ocr", 40], ["mean", 40]]
    trained = page.evaluate("document.getElementById('plot-accounting').data[1].y")
    assert len(trained) == 40 and min(trained) > 0 and max(trained) <= 48

    rows = page.locator("#item-table tbody tr")
    assert rows.count() == 25
    assert "1,200 match" in page.text_content("#item-count")

    page.fill("#item-search", "chart-001")
    page.wait_for_function(
        "document.querySelectorAll('#item-table tbody tr').length === 10", timeout=10_000
    )
    ids = page.locator("#item-table tbody tr td:first-child").all_text_contents()
    assert ids == [f"chart-{i:04d}" for i in range(10, 20)]

    page.fill("#item-search", "")
    page.select_option("#item-domain", "ocr")
    page.select_option("#item-tier", "very_easy")
    expected = int(run_dir[1].population()[2, 4])  # as saved at iteration 40
    assert expected > 0
    page.wait_for_function(
        f"document.querySelector('#item-count').textContent.startsWith('{expected:,} match')",
        timeout=10_000,
    )
    domains = page.locator("#item-table tbody tr td:nth-child(2)").all_text_contents()
    cells = page.locator("#item-table tbody tr td:nth-child(3)").all_text_contents()
    assert set(domains) == {"ocr"} and set(cells) == {"very_easy"}
    assert len(cells) == min(expected, 25)

    page.select_option("#item-domain", "")
    page.select_option("#item-tier", "")
    page.wait_for_function(
        "document.querySelector('#item-count').textContent.startsWith('1,200')", timeout=10_000
    )
    shot = (
        DOCS_SCREENSHOT
        if os.environ.get("RLCS_UPDATE_SCREENSHOT") == "1"
        else tmp_path_factory.mktemp("shot") / "dashboard.png"
    )
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert outside == []
    page.close()


@pytest.mark.slow
def test_live_run_refreshes_on_its_own(server, browser, run_dir, dashboard):
    run, cur, rng, skill = run_dir
    page = browser.new_page()
    page.goto(f"{server}/?token={TOKEN}&refresh=1")
    page.wait_for_function("document.body.dataset.iteration === '40'", timeout=20_000)
    dashboard.simulate(
        cur, 10, rng, skill, metrics=True
    )  # the writer goes on; the page is not reloaded
    page.wait_for_function("document.body.dataset.iteration === '50'", timeout=20_000)
    for plot in ("plot-valid", "plot-reward"):
        page.wait_for_function(
            f"document.getElementById('{plot}').data[0].x.length === 50", timeout=20_000
        )
    assert "as saved at iteration 50" in page.text_content("#items-note")
    page.close()


def test_subcategory_plot_shows_each_subcategory_drawn(browser, tmp_path, dashboard):
    rng = np.random.default_rng(1)
    items = [
        Item(id=f"m{i}", domain="math", prompt="?", meta={"subcategory": ("add", "sub")[i % 2]})
        for i in range(300)
    ] + [Item(id=f"o{i}", domain="ocr", prompt="?") for i in range(100)]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0, subcategory_prior=True))
    run = tmp_path / "run"
    cur.attach(run)
    skill = np.where(np.arange(cur.num_items) % 2 == 0, 0.9, 0.3)
    dashboard.simulate(cur, 10, rng, skill)
    series = RunReader(run).series()
    names = ["math/add", "math/sub", "ocr"]
    assert list(series["subcategories"]) == names
    drawn = read_store(run / "curriculum" / "aggregates.sqlite")["subcategories"]
    assert drawn and all(r["rollouts"] > 0 for r in drawn)
    # the dashed lines are the rates the sampler itself holds after the last iteration
    rates = series["subcategory_rates"]
    assert list(rates) == names
    held = {cur.category_names[c]: float(r) for c, r in enumerate(cur.category_rate)}
    assert {n: rates[n][-1] for n in names} == pytest.approx(held, abs=1e-12)
    assert rates["math/add"][-1] > rates["math/sub"][-1]  # the skills the simulation gave
    with dashboard.serve(run) as url:
        page = browser.new_page()
        page.goto(f"{url}/?token={TOKEN}")
        page.wait_for_selector("#plot-subcategories .main-svg", timeout=20_000)
        shown = page.evaluate(
            "document.getElementById('plot-subcategories').data.map((t) => t.name)"
        )
        assert shown == names + [f"{n} (sampler's rate)" for n in names]
        page.close()


@pytest.mark.slow
def test_a_run_that_has_not_started_says_so_and_fills_in_without_a_reload(
    browser, tmp_path, dashboard
):
    from rlcs.dashboard import not_a_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "driver.lock").write_text("")  # what a starting run writes first
    assert not_a_run(run) is None
    with dashboard.serve(run) as url:
        page, errors = open_page(browser, f"{url}/?token={TOKEN}&refresh=1")
        # a notice instead of empty axes, and the table says why it is empty
        assert page.is_visible("#no-iterations")
        assert f"No curriculum iteration in {run}/curriculum/ yet" in page.text_content(
            "#no-iterations"
        )
        assert all(page.is_hidden(f"#{plot}") for plot in PLOTS)
        assert page.text_content("#items-note") == "(no saved state yet)"
        assert page.text_content("#item-count") == "0 match"
        assert page.text_content("#live") == "waiting for the run"

        # the sampler stores its first iteration, before it first saves its state
        items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(50)]
        cur = curriculum_from_items(items, CurriculumConfig(seed=0))
        cur.attach(run)
        idx = cur.next_batch(8)
        cur.report(cur.id_of(idx), np.arange(len(idx) * 4).reshape(-1, 4) % 2)
        cur.end_iteration()
        page.wait_for_function("document.body.dataset.iteration === '1'", timeout=20_000)
        for plot in PLOTS:
            page.wait_for_selector(f"#{plot} .main-svg", timeout=20_000)
        assert page.is_hidden("#no-iterations")
        # one iteration: ticks at whole iterations only, none at 0.5 or 1.5
        ticks = page.locator("#plot-tiers .xtick text").all_text_contents()
        assert "1" in ticks and all(t.lstrip("\u2212-").isdigit() for t in ticks), ticks
        assert page.text_content("#items-note") == "(no saved state yet)"
        cur.save(run)
        page.wait_for_function(
            "document.querySelector('#items-note').textContent === '(as saved at iteration 1)'",
            timeout=20_000,
        )
        assert page.text_content("#item-count").startswith("50 match")

        # the run directory is removed while it is served
        cur.store.close()
        shutil.rmtree(run)
        page.wait_for_function("document.body.dataset.iteration === '0'", timeout=20_000)
        page.wait_for_selector("#no-iterations", state="visible", timeout=20_000)
        assert page.text_content("#no-iterations").startswith(f"{run} does not exist")
        assert all(page.is_hidden(f"#{plot}") for plot in PLOTS)
        assert page.text_content("#items-note") == "(no saved state yet)"
        assert errors == []
        page.close()


def test_refresh_zero_does_not_poll_without_pause(server, browser):
    page = browser.new_page()
    polls = []
    page.on("request", lambda r: polls.append(r.url) if "/api/summary" in r.url else None)
    page.goto(f"{server}/?token={TOKEN}&refresh=0")
    page.wait_for_function("document.body.dataset.iteration !== undefined", timeout=20_000)
    page.wait_for_timeout(2_000)
    assert 1 <= len(polls) <= 3  # at most one a second, not one after another
    page.close()


def test_item_table_pages_through_every_match(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/?token={TOKEN}")
    page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)

    def ids() -> list[str]:
        return page.locator("#item-table tbody tr td:first-child").all_text_contents()

    def wait_for_count(text: str) -> None:
        page.wait_for_function(
            f"document.querySelector('#item-count').textContent === {text!r}", timeout=10_000
        )

    assert page.text_content("#item-count") == "1,200 match, 1–25 shown"
    assert page.is_visible("#items-pager") and page.is_disabled("#items-prev")
    assert page.text_content("#items-pages") == "48"
    assert ids() == [f"math-{i:04d}" for i in range(25)]
    page.click("#items-next")
    wait_for_count("1,200 match, 26–50 shown")
    assert ids() == [f"math-{i:04d}" for i in range(25, 50)]
    assert page.input_value("#items-page") == "2" and page.is_enabled("#items-prev")
    page.fill("#items-page", "48")
    page.press("#items-page", "Enter")
    wait_for_count("1,200 match, 1,176–1,200 shown")
    assert ids() == [f"ocr-{i:04d}" for i in range(375, 400)]
    assert page.is_disabled("#items-next")
    page.click("#items-prev")
    wait_for_count("1,200 match, 1,151–1,175 shown")
    page.fill("#items-page", "9999")  # past the last page: the last page
    page.press("#items-page", "Enter")
    wait_for_count("1,200 match, 1,176–1,200 shown")
    assert page.input_value("#items-page") == "48"

    # a filter starts again at its first page; one page of matches needs no pager
    page.select_option("#item-domain", "chart")
    wait_for_count("400 match, 1–25 shown")
    assert ids()[0] == "chart-0000" and page.text_content("#items-pages") == "16"
    page.fill("#item-search", "chart-001")
    wait_for_count("10 match")
    assert page.is_hidden("#items-pager")
    page.close()


def test_item_table_sorts_by_the_column_clicked(server, browser):
    """A header's first click sorts by it, the second the other way (every match, across the
    pages), the third gives back the items' order."""
    page = browser.new_page()
    page.goto(f"{server}/?token={TOKEN}")
    page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)
    header = page.locator("#item-table th[data-sort='id']")

    def click_and_wait(th) -> list[str]:
        before = page.evaluate("document.body.dataset.itemsLoaded")
        th.locator("button").click()
        page.wait_for_function(f"document.body.dataset.itemsLoaded !== {before!r}")
        return page.locator("#item-table tbody tr td:first-child").all_text_contents()

    assert click_and_wait(header)[:2] == ["chart-0000", "chart-0001"]  # by name: chart first
    assert header.get_attribute("aria-sort") == "ascending"
    assert click_and_wait(header)[:2] == ["ocr-0399", "ocr-0398"]
    assert header.get_attribute("aria-sort") == "descending"
    assert click_and_wait(header)[:2] == ["math-0000", "math-0001"]  # the items' own order
    assert header.get_attribute("aria-sort") == "none"
    rate = page.locator("#item-table th[data-sort='pass_rate']")
    click_and_wait(rate)
    click_and_wait(rate)
    cells = page.locator("#item-table tbody tr td:nth-child(5)").all_text_contents()
    rates = [float(c) for c in cells if c != "–"]
    assert rates and rates == sorted(rates, reverse=True)
    assert page.get_attribute("#item-table th[data-sort='id']", "aria-sort") == "none"
    page.close()


def test_a_truncated_aggregates_store_is_named_on_the_page(browser, truncated_store_run, dashboard):
    run, store, _ = truncated_store_run
    with dashboard.serve(run) as url:
        page, errors = open_page(browser, f"{url}/?token={TOKEN}")
        notice = page.text_content("#no-iterations")
        assert page.is_visible("#no-iterations")
        assert notice.startswith(f"{store} cannot be read (database disk image is malformed)")
        assert "the header and the item table come from the run's latest saved state in" in notice
        assert all(page.is_hidden(f"#{plot}") for plot in PLOTS)
        assert page.text_content("#live") == "aggregates unreadable"
        assert page.text_content("#iteration") == "30"
        # what does not come from the store: the item table and the training figures
        assert page.text_content("#item-count") == "300 match, 1–25 shown"
        page.wait_for_selector("#plot-reward .main-svg", timeout=20_000)
        assert errors == []
        page.close()


def test_a_damaged_snapshot_is_named_above_the_item_table(browser, damaged_snapshot_run, dashboard):
    run, snap = damaged_snapshot_run
    with dashboard.serve(run) as url:
        page = browser.new_page()
        page.goto(f"{url}/?token={TOKEN}")
        page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)
        assert page.is_visible("#items-error")
        assert page.text_content("#items-error").startswith(
            f"curriculum snapshot {snap} is damaged (ema.npy: "
        )
        assert page.text_content("#items-note") == "(the saved state cannot be read)"
        # the curriculum's plots, from the store, are drawn
        for plot in PLOTS:
            page.wait_for_selector(f"#{plot} .main-svg", timeout=20_000)
        assert page.text_content("#iteration") == "30"
        page.close()


def test_names_with_markup_characters_are_shown_and_filtered_as_they_are(
    browser, tmp_path, dashboard
):
    """Domain, tier and item names are data, not markup: a custom domain named with quotes,
    angle brackets and ampersands is an option of the filters whose value and text are the
    name itself, and filtering by it finds its items; nothing in the names runs as script."""
    odd_domain = 'a"b<img src=x onerror="window.injected=1">&amp;c'
    odd_tier = "<b>hard</b> & \"very\" 'hard'"
    tier_names = [odd_tier, "middling", "easy"]
    items = [
        Item(id=f'<i id="x{i}">{i}</i>&', domain=odd_domain, prompt="?") for i in range(40)
    ] + [Item(id=f"plain-{i}", domain="math", prompt="?") for i in range(60)]
    config = CurriculumConfig(seed=0, tier_boundaries=[0.3, 0.7], tier_names=tier_names)
    cur = curriculum_from_items(items, config)
    run = tmp_path / "run"
    cur.attach(run)
    dashboard.simulate(cur, 10, np.random.default_rng(3), np.full(cur.num_items, 0.1), True)
    with dashboard.serve(run) as url:
        page, errors = open_page(browser, f"{url}/?token={TOKEN}")
        page.wait_for_selector("#plot-passrate .main-svg", timeout=20_000)

        def options(select: str) -> list[list[str]]:
            return page.evaluate(
                f"[...document.querySelectorAll('{select} option')]"
                ".map((o) => [o.value, o.textContent])"
            )

        assert options("#item-domain") == [
            ["", "all domains"], [odd_domain, odd_domain], ["math", "math"]
        ]  # fmt: skip
        assert options("#passrate-domain") == [
            ["all", "all"], [odd_domain, odd_domain], ["math", "math"]
        ]  # fmt: skip
        assert options("#item-tier") == [
            ["", "all tiers"], *([n, n] for n in [*tier_names, "unseen"])
        ]  # fmt: skip

        page.select_option("#item-domain", value=odd_domain)
        page.wait_for_function(
            "document.querySelector('#item-count').textContent.startsWith('40 match')",
            timeout=10_000,
        )
        cells = page.locator("#item-table tbody tr td:nth-child(2)").all_text_contents()
        assert set(cells) == {odd_domain} and len(cells) == 25
        ids = page.locator("#item-table tbody tr td:first-child").all_text_contents()
        assert ids == [f'<i id="x{i}">{i}</i>&' for i in range(25)]
        page.select_option("#item-tier", value=odd_tier)
        in_tier = int(cur.population()[0, 0])  # the odd domain's items in the odd tier
        assert in_tier > 0
        page.wait_for_function(
            f"document.querySelector('#item-count').textContent.startsWith('{in_tier} match')",
            timeout=10_000,
        )
        tiers = page.locator("#item-table tbody tr td:nth-child(3)").all_text_contents()
        assert set(tiers) == {odd_tier}
        # the pass-rate plot's domain picker draws the odd domain's curves
        page.select_option("#passrate-domain", value=odd_domain)
        drawn = page.evaluate("document.getElementById('plot-passrate').data.length")
        assert drawn >= 1
        # the odd domain also names a curve of the reward plot (drawn by plotly, not here)
        page.wait_for_selector("#plot-reward .main-svg", timeout=20_000)
        names = page.evaluate("document.getElementById('plot-reward').data.map((t) => t.name)")
        assert odd_domain in names
        # no element came from the names: no <img> anywhere, no <b> or <i> in the table
        assert page.locator("img, #items b, #items i").count() == 0
        assert page.evaluate("window.injected") is None
        assert errors == []
        page.close()


def test_tier_rows_that_cannot_be_read_are_named_and_the_page_recovers(
    browser, saved_run, dashboard
):
    """The summary the page polls reads only the store's metadata and last iteration; when
    only the rows the series reads are damaged (here the tier table's root page), the page
    still names the store as unreadable, and draws the plots again once it reads."""
    import sqlite3

    store = saved_run / "curriculum" / "aggregates.sqlite"
    whole = store.read_bytes()
    with sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True) as db:
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tiers'").fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    damaged = bytearray(whole)
    damaged[(root - 1) * size : root * size] = b"\xff" * size
    store.write_bytes(bytes(damaged))
    with dashboard.serve(saved_run) as url:
        page, errors = open_page(browser, f"{url}/?token={TOKEN}&refresh=1")
        assert page.text_content("#iteration") == "30"
        assert page.is_visible("#no-iterations")
        assert page.text_content("#no-iterations").startswith(f"{store} cannot be read (")
        assert page.text_content("#live") == "aggregates unreadable"
        assert all(page.is_hidden(f"#{plot}") for plot in PLOTS)
        store.write_bytes(whole)  # the store reads again: the page draws it without a reload
        for plot in PLOTS:
            page.wait_for_selector(f"#{plot} .main-svg", timeout=20_000)
        assert page.is_hidden("#no-iterations")
        assert page.text_content("#live") != "aggregates unreadable"
        assert errors == []
        page.close()
