"""Curriculum sampler at N = 10M items, and a toy learner simulation of uniform / DAPO / RLCS.

Scale: init time, ``next_batch(1024)`` latency (p50, p99), ``report()`` latency for 8,192
groups, resident bytes per item, save and restore times.

Simulation: items have a hidden true difficulty; the learner's success probability on an item
is ``sigmoid(skill + boost_i - difficulty_i)``. Training on a group raises ``boost_i`` (and, a
little, the shared ``skill``) in proportion to the group's learning signal, which is zero for
all-correct or all-wrong groups, as in GRPO. Every policy trains on the same number of groups
per iteration and may roll out at most ``expansion_cap`` times that many prompts. We count
iterations until the mean true success probability over all items reaches 80%.

``--subcategories K`` gives every domain K subcategories and turns ``subcategory_prior`` on:
the items never drawn and without a grade then follow their subcategory's pass rate, and
``next_batch`` (which closes the previous iteration) includes that update.

Usage: python benchmarks/curriculum_scale.py [--items 10000000] [--seeds 5] [--subcategories 0]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
from rounds import count

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def scale(n_items: int, rounds: int, group: int, subcategories: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(0)
    gc.collect()
    base = rss_bytes()
    domains = rng.integers(0, 6, n_items, dtype=np.uint8)
    offline = rng.random(n_items, dtype=np.float32).astype(np.float16)
    offline[rng.random(n_items) < 0.3] = np.nan  # a third of the items come without a grade
    cats = {}
    if subcategories:
        codes = domains.astype(np.uint16) * subcategories
        codes += rng.integers(0, subcategories, n_items, dtype=np.uint16)
        cats = {"categories": codes,
                "category_names": [f"sub{i}" for i in range(6 * subcategories)]}  # fmt: skip
    t0 = time.perf_counter()
    cur = Curriculum(
        domains,
        CurriculumConfig(subcategory_prior=bool(subcategories)),
        domain_names=["math", "chart", "ocr", "grounding", "gui", "vqa"],
        offline=offline,
        **cats,
    )
    init_s = time.perf_counter() - t0
    for zeroed in (cur.attempts, cur.successes, cur.ema, cur._reported):
        zeroed[:] = 0  # calloc'd pages count only once written; a run writes them all
    gc.collect()
    bytes_per_item = (rss_bytes() - base) / n_items
    print(f"arrays: {cur.nbytes() / n_items:.1f} bytes/item (pool capacity included)")
    truth = rng.random(n_items, dtype=np.float32)  # not part of the sampler's memory
    print(f"init: {init_s:.2f} s, resident {bytes_per_item:.1f} bytes/item (N={n_items:,})")

    def outcomes(idx: np.ndarray) -> np.ndarray:
        return (rng.random((len(idx), group), dtype=np.float32) < truth[idx, None]).astype(
            np.float32
        )

    batch_ms, batch_cpu_ms = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        idx = cur.next_batch(1024)
        batch_ms.append((time.perf_counter() - t0) * 1e3)
        batch_cpu_ms.append((time.thread_time() - c0) * 1e3)
        cur.report(idx, outcomes(idx))
    report_ms = []
    for _ in range(max(5, rounds // 10)):
        idx = cur.next_batch(8192)[:8192]
        rewards = outcomes(idx)
        t0 = time.perf_counter()
        cur.report(idx, rewards)
        report_ms.append((time.perf_counter() - t0) * 1e3)
    cur.end_iteration()
    p50, p99 = np.percentile(batch_ms, [50, 99])
    print(
        f"next_batch(1024) over {rounds} iterations: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
        f"(rlcs returns ceil(1024 x ratio EMA) prompts)"
    )
    c50, c99 = np.percentile(batch_cpu_ms, [50, 99])
    print(
        f"  the same calls in CPU time (blind to other processes): p50 {c50:.2f} ms, p99 {c99:.2f} ms"
    )
    print(
        f"report(8192 groups of {group}): median {statistics.median(report_ms):.1f} ms, "
        f"max {max(report_ms):.1f} ms"
    )
    run_dir = tempfile.mkdtemp(prefix="curriculum-bench-", dir=os.environ.get("BENCH_TMP"))
    try:
        t0 = time.perf_counter()
        cur.save(run_dir)
        save_s = time.perf_counter() - t0
        expected = cur.next_batch(1024)
        t0 = time.perf_counter()
        restored = Curriculum.restore(run_dir, attach=False)
        restore_s = time.perf_counter() - t0
        same = np.array_equal(restored.next_batch(1024), expected)
        print(f"save {save_s:.2f} s, restore {restore_s:.2f} s, restored next batch equal: {same}")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "init_s": init_s,
        "next_batch_p50_ms": p50,
        "next_batch_p99_ms": p99,
        "report_ms": statistics.median(report_ms),
        "bytes_per_item": bytes_per_item,
        "save_s": save_s,
        "restore_s": restore_s,
    }


class Learner:
    """A simulated policy: per-item boosts and a shared skill, both raised by GRPO signal."""

    def __init__(self, n: int, rng: np.random.Generator):
        self.difficulty = rng.normal(0.5, 2.0, n)
        self.boost = np.zeros(n)
        self.skill = 0.0

    def p(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(self.difficulty[idx] - self.boost[idx] - self.skill))

    def train(self, idx: np.ndarray, successes: np.ndarray, group: int, batch: int) -> None:
        signal = successes * (group - successes) / (group * group / 4.0)  # 1 when balanced
        self.boost[idx] += 0.6 * signal
        self.skill += 0.02 * signal.sum() / batch


def simulate(
    policy: str, seed: int, n_items=4000, batch=64, group=8, target=0.8, cap=4.0, **options
):
    """Iterations (and rollouts) until the learner's mean success over all items >= target."""
    rng = np.random.default_rng(seed)
    learner = Learner(n_items, rng)
    domains = rng.integers(0, 4, n_items)
    offline = np.clip(learner.p() + rng.normal(0, 0.1, n_items), 0, 1)  # reference-model grade
    config = CurriculumConfig(policy=policy, expansion_cap=cap, seed=seed, **options)
    cur = Curriculum(domains, config, offline=offline)
    roll_rng = np.random.default_rng(seed + 1000)
    rollouts = 0
    for it in range(1, 5001):
        idx = cur.next_batch(batch)
        succ, _ = cur.report(idx, roll_rng.random((len(idx), group)) < learner.p(idx)[:, None])
        keep = cur.select(succ, np.full(len(idx), group), batch)
        chosen, chosen_succ = idx[keep], succ[keep]
        drawn = len(idx)
        while policy == "dapo_filter" and len(chosen) < batch and drawn < cap * batch:
            more = cur.extra(min(batch - len(chosen), int(cap * batch) - drawn))
            if len(more) == 0:
                break
            s, _ = cur.report(more, roll_rng.random((len(more), group)) < learner.p(more)[:, None])
            k = cur.select(s, np.full(len(more), group), batch - len(chosen))
            chosen, chosen_succ = (
                np.concatenate([chosen, more[k]]),
                np.concatenate([chosen_succ, s[k]]),
            )
            drawn += len(more)
        rollouts += drawn * group
        learner.train(chosen, chosen_succ, group, batch)
        if learner.p().mean() >= target:
            return it, rollouts
    return 5000, rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=count(1), default=10_000_000)
    parser.add_argument("--rounds", type=count(1), default=1000, help="next_batch calls to time")
    parser.add_argument("--seeds", type=count(1), default=5)
    parser.add_argument("--subcategories", type=count(0), default=0, metavar="K")
    args = parser.parse_args()
    result = scale(args.items, args.rounds, group=8, subcategories=args.subcategories)
    gc.collect()
    sims = {}
    for policy in ("uniform", "dapo_filter", "rlcs"):
        runs = [simulate(policy, seed) for seed in range(args.seeds)]
        iters = [r[0] for r in runs]
        sims[policy] = statistics.mean(iters)
        print(
            f"sim {policy:12s} iterations to 80%: mean {sims[policy]:.1f} {iters}, "
            f"rollouts/iteration {statistics.mean(r[1] / r[0] for r in runs):.0f}"
        )
    p1 = statistics.mean(simulate("rlcs", seed, weight_power=1.0)[0] for seed in range(args.seeds))
    print(
        f"sim rlcs with weight_power=1 (plain p(1-p)): mean {p1:.1f}, ratio {p1 / sims['uniform']:.3f}"
    )
    result.update(
        sim_iters_uniform=sims["uniform"],
        sim_iters_dapo=sims["dapo_filter"],
        sim_iters_rlcs=sims["rlcs"],
        sim_ratio=sims["rlcs"] / sims["uniform"],
    )
    print("RESULT " + " ".join(f"{k}={v:.4g}" for k, v in result.items()))


if __name__ == "__main__":
    main()
