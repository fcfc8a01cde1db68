"""Fixtures of the dashboard's tests: the real FastAPI app under uvicorn on 127.0.0.1, real
Chromium through Playwright, and a real ``Curriculum`` driven through simulated iterations."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from rlcs.curriculum import Curriculum
from rlcs.tasks.gui import CHROMIUM, CHROMIUM_ARGS


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
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
