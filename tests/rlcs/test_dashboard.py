"""The curriculum dashboard, served for real and driven in real Chromium through Playwright.

The run directory is produced by the real ``Curriculum`` over simulated training iterations;
the server is the real FastAPI app under uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
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


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, dashboard):
    run = tmp_path_factory.mktemp("runs") / "curriculum-demo"
    rng = np.random.default_rng(0)
    tiers = ["very_hard", "hard", "medium", "easy", "very_easy", None]
    items = [
        Item(
            id=f"{domain}-{i:04d}",
            domain=domain,
            prompt="?",
            difficulty=tiers[i % 6] if i % 2 else float(rng.random()),
        )
        for domain in ("math", "chart", "ocr")
        for i in range(400)
    ]
    config = CurriculumConfig(seed=0)
    cur = curriculum_from_items(items, config, {"math": 2, "chart": 1, "ocr": 1})
    cur.attach(run)
    skill = np.clip(rng.beta(1.2, 1.2, cur.num_items), 0.01, 0.99)
    dashboard.simulate(cur, 40, rng, skill, metrics=True)
    return run, cur, rng, skill


@pytest.fixture(scope="module")
def server(run_dir, dashboard):
    with dashboard.serve(run_dir[0]) as url:
        yield url


def test_api_requires_the_token_and_reports_the_run(server):
    assert httpx.get(f"{server}/api/summary").status_code == 401
    assert httpx.get(f"{server}/?token=wrong").status_code == 401
    summary = httpx.get(
        f"{server}/api/summary", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert summary["iteration"] == 40 and summary["num_items"] == 1200
    assert summary["domains"] == ["math", "chart", "ocr"]
    # no API description to read without the token, and a health probe that HEAD answers
    assert httpx.get(f"{server}/openapi.json").status_code == 404
    assert httpx.head(f"{server}/healthz").status_code == 200
    js = httpx.get(f"{server}/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000  # served locally, no CDN


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


def test_cli_refuses_a_missing_run_directory(tmp_path, capsys):
    from rlcs.dashboard import main

    args = argparse.Namespace(run_dir=str(tmp_path / "nope"), host="127.0.0.1", port=0, token=None)
    assert main(args) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_finished_run_directory_copied_elsewhere_still_serves(run_dir, tmp_path):
    from fastapi.testclient import TestClient

    from rlcs.dashboard.app import create_app

    copy = tmp_path / "copy"
    shutil.copytree(run_dir[0], copy)
    client = TestClient(create_app(copy))
    series = client.get("/api/series").json()
    assert series["iterations"][-1] >= 40
    assert set(series["pass_rate"]) == {"all", "math", "chart", "ocr"}
    items = client.get("/api/items", params={"q": "math-000", "limit": 5}).json()
    assert [r["id"] for r in items["rows"]] == [f"math-000{i}" for i in range(5)]


def test_rlcs_dashboard_command_serves_the_run(run_dir, dashboard):
    import subprocess
    import sys

    port = dashboard.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "dashboard", str(run_dir[0]), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/summary", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["run"] == "curriculum-demo"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_item_table_shows_subcategories_and_the_rate_items_take_from_them(tmp_path):
    items = [
        Item(id=f"m{i}", domain="math", prompt="?", meta={"subcategory": ("add", "sub")[i % 2]})
        for i in range(200)
    ]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0, subcategory_prior=True))
    run = tmp_path / "run"
    cur.attach(run)
    idx = cur.next_batch(20)
    cur.report(cur.id_of(idx), np.where((idx % 2 == 0)[:, None], 1.0, np.arange(8) % 2))
    cur.end_iteration()
    cur.save(run)
    rows = RunReader(run).items(limit=200)["rows"]
    assert {r["subcategory"] for r in rows} == {"add", "sub"}
    drawn = set(cur.id_of(idx))
    never = [r for r in rows if r["id"] not in drawn]
    # an item never drawn shows its subcategory's rate, matching the tier it sits in
    assert {(r["subcategory"], r["pass_rate"], r["tier"]) for r in never} == {
        ("add", 1.0, "very_easy"),
        ("sub", 0.5, "medium"),
    }


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


def test_a_store_written_before_subcategories_reads_without_them(tmp_path):
    import sqlite3

    cur = curriculum_from_items([Item(id="a", domain="math", prompt="?")], CurriculumConfig())
    cur.attach(tmp_path)
    cur.next_batch(1)
    cur.end_iteration()
    path = tmp_path / "curriculum" / "aggregates.sqlite"
    cur.store.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE subcategories")
    stored = read_store(path)
    assert stored["subcategories"] == [] and len(stored["iterations"]) == 1
    series = RunReader(tmp_path).series()
    assert series["subcategories"] == {} and series["subcategory_rates"] == {}

    # a store whose table predates the sampler's rate gains the column when a run reopens it
    from rlcs.curriculum.store import AggregateStore

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE subcategories (iteration INTEGER NOT NULL, subcategory TEXT "
                   "NOT NULL, domain TEXT NOT NULL, rollouts INTEGER NOT NULL, successes "
                   "INTEGER NOT NULL, PRIMARY KEY (iteration, subcategory))")  # fmt: skip
    store = AggregateStore(path)
    row = dict(stored["iterations"][0], iteration=2)
    sub = {"subcategory": "math/add", "domain": "math", "rollouts": 8, "successes": 6}
    store.write_iteration(row, [], [dict(sub, rate=0.7)])
    store.close()
    assert read_store(path)["subcategories"] == [dict(sub, iteration=2, rate=0.7)]


def test_a_demo_directory_is_served_through_its_rl_stage(run_dir, tmp_path):
    from fastapi.testclient import TestClient

    from rlcs.dashboard import resolve_run_dir
    from rlcs.dashboard.app import create_app

    demo = tmp_path / "demo"
    (demo / "pretrain").mkdir(parents=True)
    (demo / "pretrain" / "config.yaml").write_text("stage: pretrain\n")
    # still pretraining: the RL stage's directory is where the curriculum will appear
    assert resolve_run_dir(demo) == demo / "rl"
    assert create_app(resolve_run_dir(demo)) is not None
    shutil.copytree(run_dir[0], demo / "rl")
    assert resolve_run_dir(demo) == demo / "rl"
    series = TestClient(create_app(resolve_run_dir(demo))).get("/api/series").json()
    assert series["iterations"][-1] >= 40
    # a run directory, and any other directory, are served as given
    assert resolve_run_dir(demo / "rl") == demo / "rl"
    assert resolve_run_dir(tmp_path) == tmp_path


def _rlcs_dashboard(folder: Path, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", "dashboard", str(folder), "--port", str(port)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_folder_of_runs_is_refused_naming_the_runs(run_dir, tmp_path, dashboard):
    runs = tmp_path / "runs"
    shutil.copytree(run_dir[0], runs / "curriculum-demo")
    (runs / "sft-run").mkdir()
    (runs / "sft-run" / "config.yaml").write_text("stage: sft\n")
    (runs / "demo" / "data").mkdir(parents=True)  # `rlcs demo` building its data
    (runs / "demo" / "demo-run.json").write_text("{}")
    (runs / "notes").mkdir()
    r = _rlcs_dashboard(runs, dashboard.free_port())
    assert r.returncode == 2 and "http://" not in r.stderr
    assert r.stderr.splitlines() == [
        f"rlcs dashboard: {runs} holds runs, not a run: curriculum-demo, demo, sft-run; give one "
        f"of them, e.g. rlcs dashboard {runs / 'curriculum-demo'}"
    ]


def test_a_folder_with_no_run_is_refused_and_one_about_to_start_is_served(tmp_path, dashboard):
    from rlcs.dashboard import not_a_run, resolve_run_dir

    other = tmp_path / "other"
    (other / "photos").mkdir(parents=True)
    (other / "notes.txt").write_text("")
    r = _rlcs_dashboard(other, dashboard.free_port())
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"rlcs dashboard: {other} holds no run: no config.yaml, metrics.jsonl or curriculum/ in "
        "it or in a folder inside it; give a run directory, e.g. runs/demo/rl"
    ]
    starting = tmp_path / "starting"  # a run building its data, before its config.yaml
    (starting / "data").mkdir(parents=True)
    (starting / "data" / "rl_train.jsonl").write_text("")
    assert not_a_run(starting) is None
    # its driver takes the directory's lock first (cluster.run_lock), as `rlcs demo` starts the
    # dashboard on its RL stage
    (starting / "driver.lock").write_text("")
    assert not_a_run(starting) is None
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "driver.lock").write_text("")
    assert not_a_run(locked) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not_a_run(empty) is None and resolve_run_dir(empty) == empty
    demo = tmp_path / "demo"  # a demo still building its data is served through its RL stage
    demo.mkdir()
    (demo / "demo-run.json").write_text("{}")
    assert not_a_run(demo) is None and resolve_run_dir(demo) == demo / "rl"


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
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{url}/?token={TOKEN}&refresh=1")
        page.wait_for_function("document.body.dataset.itemsLoaded !== undefined", timeout=20_000)
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


def test_series_of_a_long_run_adds_up_every_row(tmp_path):
    """2,000 iterations of 4 domains, 6 tiers and 8 subcategories, summed per tier and domain.
    (The per-iteration lists were once built again for every row read: 10 s and more a poll
    at 10,000 iterations; the speed is not timed here.)"""
    n, domains = 2_000, ["math", "ocr", "chart", "gui"]
    tiers = ["very_hard", "hard", "medium", "easy", "very_easy", "unseen"]
    iterations = [{"iteration": i, "expansion_ratio": 2.0, "expansion_ema": 2.0,
                   "valid_fraction": 0.5, "pass_at_k": 0.75, "mean_pass_rate": 0.5,
                   "histogram": [1] * 20} for i in range(1, n + 1)]  # fmt: skip
    rows = [{"iteration": i, "domain": d, "tier": t, "population": 10, "sampled": 2,
             "rollouts": 16, "successes": 4 + tiers.index(t)}
            for i in range(1, n + 1) for d in domains for t in tiers]  # fmt: skip
    subs = [{"iteration": i, "subcategory": f"{d}/{k}", "domain": d, "rollouts": 8,
             "successes": 2 if k == "a" else 6, "rate": None if i % 2 else 0.5}
            for i in range(1, n + 1) for d in domains for k in "ab"]  # fmt: skip
    reader = RunReader(tmp_path)
    reader.store = lambda: {"meta": {"tiers": tiers, "domains": domains},
                            "iterations": iterations, "tiers": rows, "subcategories": subs}  # fmt: skip
    series = reader.series()
    assert series["population"]["easy"] == [40] * n
    assert series["pass_rate"]["all"]["hard"] == [5 / 16] * n
    assert series["pass_rate"]["ocr"]["very_easy"] == [8 / 16] * n
    assert series["subcategories"]["gui/a"] == [0.25] * n
    assert series["subcategory_rates"]["gui/b"] == [None] + [0.5] * (n - 1)
