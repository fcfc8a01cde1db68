"""Held-out evaluation: a model's answers from a rollout worker, scored by the verifiers.

`evaluate` gives the per-domain greedy pass rates that `rlcs demo` and the benchmarks report;
`answer_items` gives every scored answer, which `rlcs eval` (`cluster.eval_command`) and
`rlcs grade` build on.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Any

import ray

from actors.rollout.worker import RolloutWorker, worker_options
from cluster.placement import thread_env
from rewards.base import is_unscorable
from rlcs.config import RolloutConfig
from rlcs.data import Item
from rlcs.images import inline_images
from rlcs.vlm_processor import takes_images


def figures(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The demo's and the benchmarks' figures from an `eval_summary` of one greedy answer an
    item: each domain's (and "all"'s) ``pass_rate`` (reward 1) and mean ``reward``."""
    return {d: {"pass_rate": v["pass_rate"], "reward": v["reward"]} for d, v in summary.items()}


def answer_records(
    trajs: Sequence[Any], by_id: dict[str, Item], scores: Iterable[tuple[float, str | None, Any]]
) -> list[dict[str, Any]]:
    """One record per scored answer, in order: the item's id and domain, the answer's index
    among the item's, the response, its reward, whether it passed (reward 1, no error), the
    verifier's error, the extracted answer, and how generation ended. ``scores`` gives each
    trajectory's (reward, error, extracted answer)."""
    seen: Counter[str] = Counter()
    out = []
    for t, (reward, error, extracted) in zip(trajs, scores, strict=True):
        out.append({
            "id": t.item_id, "domain": by_id[t.item_id].domain, "sample": seen[t.item_id],
            "response": t.response, "reward": reward, "passed": error is None and reward >= 1.0,
            "error": error, "extracted": extracted, "finish_reason": t.finish_reason,
            "forced_answer": t.forced_answer,
        })  # fmt: skip
        seen[t.item_id] += 1
    return out


#: the held-out samples' seeds (``step`` of the rollout workers) sit this far from the training
#: rollouts', whose step is the iteration
EVAL_STEP_OFFSET = 1 << 20


def evaluate_live(
    roles: Any,
    items: list[Item],
    timeout_s: float,
    samples: int = 0,
    temperature: float = 1.0,
    step: int = EVAL_STEP_OFFSET,
) -> dict[str, dict[str, float]]:
    """The same figures from a running RL loop: greedy answers from its own rollout workers
    (which hold the learner's latest weights), scored on its reward pool. With ``samples``, also
    that many answers per item at ``temperature`` (seeded by ``step``): each domain's
    ``sampled_pass_rate`` and ``pass_at_k``, as `rlcs eval --samples` gives them."""
    from cluster.rl_iteration import score

    by_id = {it.id: it for it in items}

    def scored(trajs: list) -> list[dict[str, Any]]:  # on the run's reward pool
        score(roles.rewards, trajs, by_id, timeout_s)
        detail = [(t.reward, t.reward_detail.get("error"), t.reward_detail.get("extracted"))
                  for t in trajs]  # fmt: skip
        return answer_records(trajs, by_id, detail)

    out = figures(eval_summary(scored(roles.rollout.generate(items, n=1, temperature=0.0))))
    if samples:
        sampled = roles.rollout.generate(items, n=samples, temperature=temperature, step=step)
        for domain, v in eval_summary(scored(sampled)).items():
            out[domain].update(sampled_pass_rate=v["pass_rate"], pass_at_k=v["pass_at_k"])
    return out


@contextmanager
def rollout_workers(
    model_path: str | Path,
    rollout: RolloutConfig,
    num_cpus: float,
    num_gpus: float = 0.0,
    count: int = 1,
    dtype: str = "float32",
):
    """``count`` rollout workers of their own for ``model_path`` (its weights in ``dtype``, a
    run's ``model.dtype``), each reserving ``num_cpus`` (and running that many threads,
    rounded, at least one) and ``num_gpus``; Ray places them on any node of the cluster that
    has room. Killed on leaving, also on failure.

    Needs a Ray connection (``cluster.ray_connect.connect_ray``): left to itself, Ray would join
    whatever cluster is running on this machine, or start one with every core.
    """
    if not ray.is_initialized():
        raise RuntimeError(
            "held-out evaluation needs a Ray connection: call cluster.ray_connect.connect_ray(cfg) "
            "(or ray.init) first, so that it runs on the cluster you chose"
        )
    opts = {"num_cpus": num_cpus, "runtime_env": thread_env(num_cpus)}
    if num_gpus:
        opts["num_gpus"] = num_gpus
    workers = []
    try:
        for _ in range(count):
            workers.append(
                RolloutWorker.options(**worker_options(rollout, **opts)).remote(
                    str(model_path), rollout.model_dump(), dtype=dtype
                )
            )
        yield workers
    finally:
        for w in workers:
            ray.kill(w)


def score_trajectories(
    trajs: list,
    by_id: dict[str, Item],
    timeout_s: float | None = None,
    options: Mapping[str, Any] | None = None,
):
    """The verifiers' ``ScoreResult`` of each trajectory against its item's answer, in order,
    under the verifier ``options`` a run's reward pool gets (``options_from_config``: the
    response format, tolerances, partial credit)."""
    import rewards
    from cluster.rl_iteration import reward_requests

    return rewards.score_batch(reward_requests(trajs, by_id, options), timeout_s=timeout_s)


def answer_items(
    model_path: str | Path,
    items: Sequence[Item],
    rollout: RolloutConfig,
    samples: int = 1,
    *,
    temperature: float = 0.0,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    workers: int = 1,
    batch_items: int | None = None,
    timeout_s: float | None = None,
    reward_options: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    progress: bool = False,
    desc: str = "eval",
    ship_images: bool = False,
    on_batch: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """``samples`` answers to every item at ``temperature`` (0: greedy), each scored by the
    verifiers (with ``reward_options``, as `score_trajectories` takes them): one
    `answer_records` record per answer, in item order. The model runs in ``dtype``.

    ``workers`` rollout workers, each reserving ``num_cpus`` and ``num_gpus``
    (`rollout_workers`), answer ``batch_items`` items a call (all of them in one call by
    default, as `evaluate` does), each taking the next batch as it finishes one; the batches
    are scored here as they come back. Image paths must be absolute; with ``ship_images``
    (``cluster.ship_images``) they are read here and sent inside the items, for workers on
    nodes without the files. ``on_batch`` gets each batch's records as they are scored.
    """
    from rlcs.progress import progress_bar

    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if temperature < 0.0:
        raise ValueError(f"temperature must be 0 (greedy) or above, got {temperature}")
    if samples > 1 and temperature == 0.0:
        raise ValueError("several greedy answers to an item are one answer: set a temperature")
    if batch_items is not None and batch_items < 1:
        raise ValueError(f"batch_items must be at least 1, got {batch_items}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    by_id = {it.id: it for it in items}
    if len(by_id) != len(items):
        dup = next(i for i, n in Counter(it.id for it in items).items() if n > 1)
        raise ValueError(f"item ids must be unique: {dup!r} appears more than once")
    if problem := images_problem(model_path, items):
        raise ValueError(problem)
    cfg = rollout.model_copy(update={"n": samples, "temperature": temperature})
    step = batch_items or max(1, len(items))
    starts = list(range(0, len(items), step))
    count = min(workers, len(starts)) or 1
    done: dict[int, list[dict[str, Any]]] = {}
    with (
        rollout_workers(model_path, cfg, num_cpus, num_gpus, count, dtype) as pool,
        progress_bar(total=len(items), desc=desc, unit="item", disable=not progress) as bar,
    ):
        running: dict[Any, tuple[Any, int]] = {}

        def send(worker: Any) -> None:
            if starts:
                start = starts.pop(0)
                chunk = list(items[start : start + step])
                sent = [inline_images(it) for it in chunk] if ship_images else chunk
                ref = worker.generate.remote(sent, n=samples, step=start, temperature=temperature)
                running[ref] = (worker, start)

        for w in pool:
            send(w)
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            worker, start = running.pop(ref)
            send(worker)  # the worker takes the next batch while this one is scored
            trajs = ray.get(ref)
            scored = score_trajectories(trajs, by_id, timeout_s, reward_options)
            done[start] = answer_records(
                trajs, by_id, ((r.reward, r.error, r.extracted) for r in scored)
            )
            if on_batch is not None:
                on_batch(done[start])
            bar.update(len(items[start : start + step]))
    return [r for start in sorted(done) for r in done[start]]


def images_problem(model_path: str | Path, items: Sequence[Item]) -> str | None:
    """Why ``items`` cannot go to the model at ``model_path``: one has images and the model is
    text-only (no vision tower), which its engine would refuse only once it is started; or
    None."""
    first = next((it for it in items if it.images), None)
    # no readable config.json (None): the engine says what is wrong
    if first is None or takes_images(model_path) is not False:
        return None
    return (
        f"item {first.id!r} has images, but {model_path} is a text-only model (no vision tower), "
        "which cannot read them: give it items without images, or a vision model"
    )


def evaluate(
    model_path: str | Path,
    items: list[Item],
    rollout: RolloutConfig,
    num_cpus: float = 1.0,
    reward_options: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, dict[str, float]]:
    """Per-domain pass rate (reward 1) and mean reward of one greedy answer per item, from a
    worker that reserves ``num_cpus`` and runs that many threads (rounded, at least one).

    With ``progress``, a bar (``desc``) counts the items answered: they go to the worker in
    about eight calls of at least 64 items instead of one, and each is scored while the worker
    answers the next. The greedy answers are those of one call (the demo's 512 held-out items:
    all 512 alike, in 11 s against 25)."""
    batch = max(64, math.ceil(len(items) / 8)) if progress else None
    records = answer_items(model_path, items, rollout, num_cpus=num_cpus, batch_items=batch,
                           reward_options=reward_options, dtype=dtype, progress=progress,
                           desc=desc)  # fmt: skip
    return figures(eval_summary(records))


def eval_summary(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per domain, and "all" (the mean over domains, each weighed alike):
    items, answers, ``pass_rate`` (the share of answers with reward 1), ``pass_at_k`` (the share
    of items with at least one), mean ``reward``, errors by kind, and ``unscorable``: answers the
    verifiers could not score (a timeout, a crash), counted as failures and reported here."""
    by_domain: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_domain[r["domain"]].append(r)
    out: dict[str, dict[str, Any]] = {}
    for d in sorted(by_domain):
        rs = by_domain[d]
        passed: dict[str, bool] = {}
        for r in rs:
            passed[r["id"]] = passed.get(r["id"], False) or r["passed"]
        errors = Counter(r["error"] for r in rs if r["error"] is not None)
        out[d] = {
            "items": len(passed), "answers": len(rs),
            "pass_rate": fmean(r["passed"] for r in rs), "pass_at_k": fmean(passed.values()),
            "reward": fmean(r["reward"] for r in rs), "errors": dict(sorted(errors.items())),
            "unscorable": sum(n for k, n in errors.items() if is_unscorable(k)),
        }  # fmt: skip
    if out:
        doms = list(out.values())
        errors = sum((Counter(v["errors"]) for v in doms), Counter())
        out["all"] = {
            "items": sum(v["items"] for v in doms), "answers": sum(v["answers"] for v in doms),
            **{k: fmean(v[k] for v in doms) for k in ("pass_rate", "pass_at_k", "reward")},
            "errors": dict(sorted(errors.items())),
            "unscorable": sum(v["unscorable"] for v in doms),
        }  # fmt: skip
    return out
