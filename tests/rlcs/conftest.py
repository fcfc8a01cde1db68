"""Fixtures of the dashboard's tests: the real FastAPI app under uvicorn on 127.0.0.1, real
Chromium through Playwright, and a real ``Curriculum`` driven through simulated iterations."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum, curriculum_from_items
from rlcs.data import Item
from rlcs.tasks.gui import CHROMIUM_ARGS, ChromiumMissing, find_chromium


class DashboardHarness:
    #: every data route of the served dashboards requires this token
    token = "s3cret-dashboard-token"

    @staticmethod
    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    @staticmethod
    def simulate(
        cur: Curriculum,
        iterations: int,
        rng: np.random.Generator,
        skill: np.ndarray,
        metrics: bool = False,
    ) -> None:
        """Simulated RL iterations: the learner gets better on the items it trains on; the
        sampler saves its state every 10 iterations. With ``metrics``, each iteration appends
        to the run's metrics.jsonl the training figures the driver logs (the simulated
        rollouts' mean reward per domain and overall, the groups rolled out and trained)."""
        run = cur.store.path.parents[1]
        for _ in range(iterations):
            idx = cur.next_batch(48)
            passed = rng.random((len(idx), 8)) < skill[idx, None]
            succ, sizes = cur.report(cur.id_of(idx), passed)
            chosen = idx[cur.select(succ, sizes, 48)]
            skill[chosen] = np.minimum(skill[chosen] + 0.08, 0.99)
            if metrics:
                domains = np.asarray(cur.domain_names)[cur.domain[idx]]
                rec = {"step": cur.iteration, "stage": "rl", "reward/mean": float(passed.mean()),
                       "curriculum/groups": float(len(idx)),
                       "curriculum/selected": float(len(chosen))}  # fmt: skip
                for d in sorted(set(domains)):
                    rec[f"reward/{d}"] = float(passed[domains == d].mean())
                with (run / "metrics.jsonl").open("a") as f:
                    f.write(json.dumps(rec) + "\n")
            if cur.iteration % 10 == 0:
                cur.end_iteration()
                cur.save(run)

    @contextmanager
    def serve(self, run: Path):
        """The dashboard app for ``run`` under uvicorn on a free local port; yields its URL."""
        import uvicorn

        from rlcs.dashboard.app import create_app

        port = self.free_port()
        cfg = uvicorn.Config(
            create_app(run, token=self.token), host="127.0.0.1", port=port, log_level="warning"
        )
        srv = uvicorn.Server(cfg)
        thread = threading.Thread(target=srv.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.started, "uvicorn did not start"
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            srv.should_exit = True
            thread.join(timeout=10)


@pytest.fixture(scope="session")
def dashboard() -> DashboardHarness:
    return DashboardHarness()


@pytest.fixture(scope="module")
def browser():
    try:
        chromium = find_chromium()
    except ChromiumMissing as e:
        pytest.skip(str(e))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, dashboard):
    """A run of 1,200 items in three domains after 40 simulated iterations, saved at 40:
    ``(run directory, its Curriculum, the rng, the simulated skill)``. One a test module, as
    the live-run test goes on writing to it."""
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
    """The dashboard of ``run_dir`` under uvicorn; its URL."""
    with dashboard.serve(run_dir[0]) as url:
        yield url


@pytest.fixture
def saved_run(tmp_path, dashboard) -> Path:
    """A run of 300 items after 30 simulated iterations, saved at 30, its store closed."""
    items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(300)]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0))
    run = tmp_path / "run"
    cur.attach(run)
    skill = np.full(cur.num_items, 0.5)
    dashboard.simulate(cur, 30, np.random.default_rng(2), skill, metrics=True)
    cur.store.close()  # the sampler's WAL is folded into the file
    return run


@pytest.fixture
def truncated_store_run(saved_run) -> tuple[Path, Path, bytes]:
    """``saved_run`` with its aggregates.sqlite cut to half its length: ``(run directory, the
    store, its whole bytes)``."""
    store = saved_run / "curriculum" / "aggregates.sqlite"
    whole = store.read_bytes()
    store.write_bytes(whole[: len(whole) // 2])
    return saved_run, store, whole


@pytest.fixture
def damaged_snapshot_run(saved_run) -> tuple[Path, Path]:
    """``saved_run`` with one array of its latest snapshot cut short: ``(run directory, the
    snapshot)``."""
    snap = saved_run / "curriculum" / (saved_run / "curriculum" / "LATEST").read_text().strip()
    ema = snap / "ema.npy"
    ema.write_bytes(ema.read_bytes()[:100])
    return saved_run, snap
