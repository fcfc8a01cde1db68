"""One RL iteration, phase by phase, and the metrics it reports.

The phases are timed separately (generate, reward, sampler, learn, sync, and sleep where the
engines sleep while the learner trains); whatever wall time is left over is the orchestration
overhead.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

import ray

from actors.reward import training_options
from actors.weights import WeightSyncError
from rewards import degenerate
from rewards.base import is_unscorable
from rlcs.config import Config
from rlcs.data import Item, Trajectory
from rlcs.group_filters import filtered_out
from rlcs.images import decode_image

log = logging.getLogger(__name__)

PHASES = ("generate", "reward", "sampler", "learn", "sync")


@dataclass
class IterationResult:
    metrics: dict[str, float]
    samples: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)


@contextmanager
def timed(timings: dict[str, float], phase: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - t0


def reward_requests(
    trajs: list[Trajectory], items: dict[str, Item], options: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One verifier request per trajectory: its item's domain and answer, its response, and
    ``options`` when there are any."""
    extra = {"options": dict(options)} if options else {}
    return [{"domain": items[t.item_id].domain, "response": t.response,
             "answer": items[t.item_id].answer, **extra} for t in trajs]  # fmt: skip


def score(
    rewards: Any,
    trajs: list[Trajectory],
    items: dict[str, Item],
    timeout_s: float,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Score every trajectory on the reward pool, in place; ``options``, each item's verifier
    options over the pool's defaults (``actors.reward.training_options`` for rollouts)."""
    requests = reward_requests(trajs, items, options)
    for t, res in zip(trajs, rewards.score(requests, timeout_s=timeout_s), strict=True):
        t.reward = float(res.reward)
        t.reward_detail = {
            "format_ok": res.format_ok,
            "extracted": res.extracted,
            "error": res.error,
            "detail": res.detail,
        }


def unscorable(t: Trajectory) -> bool:
    """Whether ``t``'s reward could not be computed (a timeout, a crash, a verifier fault), as
    opposed to a wrong, unformatted or unreadable answer, which scores 0 like any failure."""
    return is_unscorable(t.reward_detail.get("error"))


def counts(cfg: Config, t: Trajectory) -> bool:
    """Whether ``t``'s reward counts, for the curriculum and the update: an unscorable rollout's
    does not under ``reward.unscorable: drop``."""
    return cfg.reward.unscorable == "zero" or not unscorable(t)


def learner_batch(
    trajs: list[Trajectory], selected: set[str], items: dict[str, Item]
) -> list[dict]:
    """The selected groups as the learner takes them, with their images opened."""
    batch = []
    for t in trajs:
        if t.item_id in selected:
            row = t.to_dict()
            row["images"] = [decode_image(ref, Path("/")) for ref in items[t.item_id].images]
            batch.append(row)
    return batch


def push_weights(roles: Any, attempts: int = 3) -> Any:
    """Push the learner's weights to the live rollout workers. A worker that restarts or dies
    during the push fails it (no engine commits a partial push), so wait for the group to settle
    and push again to the workers that are left."""
    attempt = 1
    while True:
        # the group drops workers that died while generating: never push to those
        roles.transport.use_workers(roles.rollout.live_workers, roles.rollout.alive)
        try:
            return roles.learner.push_weights(roles.transport)
        except WeightSyncError as e:
            if attempt >= attempts or not roles.rollout.recover_workers():
                raise
            log.error("weight push failed (%s); pushing again to the live rollout workers", e)
            attempt += 1


@dataclass
class Rounds:
    """What the iteration's generation rounds gathered (one round, or more under dapo_filter)."""

    trajs: list[Trajectory] = field(default_factory=list)
    scored: list[Trajectory] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    groups: int = 0
    valid: int = 0
    filtered: int = 0
    count: int = 0


def generate_round(
    cfg: Config, roles: Any, items: dict[str, Item], ids: list[str], batch: int | None,
    iteration: int, timings: dict[str, float], acc: Rounds,
) -> None:  # fmt: skip
    """Roll out ``ids``, score them, report the groups; adds what the sampler selected to ``acc``."""
    with timed(timings, "generate"):
        trajs = roles.rollout.generate([items[i] for i in ids], step=iteration)
    with timed(timings, "reward"):
        score(roles.rewards, trajs, items, cfg.reward.timeout_s, training_options(cfg.reward))
    # a rollout that could not be scored says nothing of the item or the policy: under
    # reward.unscorable "drop" it leaves its group (a group left empty is not reported)
    scored = [t for t in trajs if counts(cfg, t)]
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in scored:
        groups[t.item_id].append(t)
    barred = filtered_out(roles.group_filter, items, groups) if roles.group_filter else []
    outcomes = {i: [t.reward for t in g] for i, g in groups.items()}
    with timed(timings, "sampler"):
        report = ray.get(roles.sampler.report.remote(outcomes, barred, batch))
    acc.trajs += trajs
    acc.scored += scored
    acc.selected += report["selected"]
    acc.groups += report["groups"]
    acc.valid += report["valid_groups"]
    acc.filtered += len(barred)
    acc.count += 1


def top_up(
    cfg: Config, roles: Any, items: dict[str, Item], iteration: int,
    timings: dict[str, float], acc: Rounds,
) -> None:  # fmt: skip
    """DAPO's dynamic sampling: roll out fresh prompts until the batch holds
    ``prompts_per_iteration`` valid groups, for at most ``run.topup_rounds`` more rounds. Each
    round asks for the missing groups over the share of valid groups seen so far."""
    batch = cfg.run.prompts_per_iteration
    for _ in range(cfg.run.topup_rounds):
        missing = batch - len(acc.selected)
        if missing <= 0:
            return
        # dapo_filter selects every valid group the filter let through, up to the round's
        # batch, and a round that fills it ends the top-up: the useful groups are the selected
        # ones (valid minus barred would count a barred group that was not valid twice)
        useful = len(acc.selected) / max(acc.groups, 1)
        n = min(batch, math.ceil(missing / useful)) if useful > 0 else batch
        with timed(timings, "sampler"):
            ids = ray.get(roles.sampler.extra.remote(n))
        if not ids:  # every item drawn this iteration already
            return
        generate_round(cfg, roles, items, ids, missing, iteration, timings, acc)


@dataclass
class Gathered:
    """An iteration's rollouts, scored and reported to the curriculum, ready for the learner."""

    iteration: int
    rounds: Rounds
    stats: dict[str, Any]
    timings: dict[str, float]


def gather(cfg: Config, roles: Any, items: dict[str, Item], iteration: int) -> Gathered:
    """Draw the iteration's prompts, roll them out, score them, and close the iteration in the
    curriculum (whose bookkeeping needs the rewards, not the update)."""
    timings: dict[str, float] = {}
    with timed(timings, "sampler"):
        ids = ray.get(roles.sampler.next_batch.remote(cfg.run.prompts_per_iteration))
    rounds = Rounds()
    generate_round(cfg, roles, items, ids, None, iteration, timings, rounds)
    if cfg.curriculum.policy == "dapo_filter":
        top_up(cfg, roles, items, iteration, timings, rounds)
    kinds = Counter(t.reward_detail.get("error") for t in rounds.trajs if unscorable(t))
    if kinds:
        log.warning(
            "iteration %d: %d of %d rollouts could not be scored (%s); %s", iteration + 1,
            sum(kinds.values()), len(rounds.trajs),
            ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
            "trained on as wrong answers (reward.unscorable: zero)"
            if cfg.reward.unscorable == "zero"
            else "left out of training (reward.unscorable: drop)",
        )  # fmt: skip
    with timed(timings, "sampler"):
        closed = ray.get(roles.sampler.end_iteration.remote())
        stats = ray.get(roles.sampler.stats.remote())
    stats["tier_pass_rate"] = closed.get("tier_pass_rate", {})
    stats["subcategory_pass_rate"] = closed.get("subcategory_pass_rate", {})
    return Gathered(iteration, rounds, stats, timings)


def _batch_of(g: Gathered, items: dict[str, Item]) -> list[dict]:
    return learner_batch(g.rounds.scored, set(g.rounds.selected), items)


def _sync(roles: Any, timings: dict[str, float]) -> None:
    with timed(timings, "sync"):
        sync = push_weights(roles)
    timings["sync_transfer"] = sync.seconds


def finish(
    cfg: Config, roles: Any, items: dict[str, Item], g: Gathered, learn: dict[str, Any],
    timings: dict[str, float], wall: float,
) -> IterationResult:  # fmt: skip
    """The iteration's metrics and its logged samples."""
    selected = set(g.rounds.selected)
    metrics = _metrics(roles, g.rounds, items, learn, g.stats, timings, wall)
    samples = [
        {
            **t.to_dict(),
            "domain": items[t.item_id].domain,
            "selected": t.item_id in selected and counts(cfg, t),
            "unscorable": unscorable(t),
        }
        for t in g.rounds.trajs[: cfg.run.samples_per_iteration * cfg.rollout.n]
    ]
    return IterationResult(metrics, samples, timings)


def run_iteration(
    cfg: Config, roles: Any, items: dict[str, Item], iteration: int
) -> IterationResult:
    """One iteration, phase after phase: roll out, score, learn, push the new weights."""
    t_start = time.perf_counter()
    g = gather(cfg, roles, items, iteration)
    timings = dict(g.timings)
    learn: dict[str, Any] = {}
    if g.rounds.selected:
        if cfg.rollout.sleep_between_iterations:  # vLLM on GPU frees its memory for the learner;
            with timed(timings, "sleep"):  # the weight push wakes it
                roles.rollout.sleep()
        with timed(timings, "learn"):
            learn = roles.learner.train_step("rl", _batch_of(g, items))
        _sync(roles, timings)
    return finish(cfg, roles, items, g, learn, timings, time.perf_counter() - t_start)


class OverlappedIterations:
    """``run.overlap_rollout``: the rollouts of iteration k+1 are generated (and scored) while
    the learner trains on those of iteration k, then the new weights are pushed.

    Iteration k+1's rollouts thus come from the weights after update k-1, one update behind the
    learner (one-step off-policy, as the logged ``logprob_mismatch`` shows). The update takes
    them as they are: its ratio is to the learner's own logprobs of this step, so nothing
    corrects or clips for the older policy that sampled them. The rollout engines and the
    learner work at the same time instead of in turn: on a GPU cluster neither pool idles
    while the other works, and on CPU the two roles split the cores (``cluster.colocate``
    gives each its own share of threads then, not the whole bundle's).

    ``run(k, prefetch)`` trains on iteration k's rollouts (gathered now, or by the call before)
    and, with ``prefetch``, gathers iteration k+1's meanwhile. The driver prefetches only
    where it will run iteration k+1 and no checkpoint falls after k: a checkpoint's curriculum
    snapshot then holds no outcomes of a batch the learner has not trained on. An iteration's
    metrics are those of the rollouts it trained on; their generation and reward times are
    those of their gathering, during the iteration before (the sum of phases can exceed
    ``time/iteration``). ``time/learn_wait`` is how long the driver waited for the learner
    after its prefetch."""

    def __init__(self, cfg: Config, roles: Any, items: dict[str, Item]):
        self.cfg, self.roles, self.items = cfg, roles, items
        self.ready: Gathered | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlcs-learner")

    @property
    def holds_batch(self) -> bool:
        """Whether the next iteration's rollouts are gathered already."""
        return self.ready is not None

    def _learn(self, batch: list[dict]) -> tuple[dict[str, Any], float]:
        t0 = time.perf_counter()
        out = self.roles.learner.train_step("rl", batch)
        return out, time.perf_counter() - t0

    def run(self, iteration: int, prefetch: bool) -> IterationResult:
        cfg, roles, items = self.cfg, self.roles, self.items
        t_start = time.perf_counter()
        g = self.ready
        if g is not None and g.iteration != iteration:  # its outcomes are in the curriculum:
            # keep it held for the iteration it belongs to
            raise RuntimeError(f"iteration {iteration} called with {g.iteration}'s rollouts held")
        self.ready = None
        if g is None:
            g = gather(cfg, roles, items, iteration)
        timings = dict(g.timings)
        pending: Future | None = None
        if g.rounds.selected:
            pending = self.pool.submit(self._learn, _batch_of(g, items))
        learn: dict[str, Any] = {}
        try:
            if prefetch:
                self.ready = gather(cfg, roles, items, iteration + 1)
        finally:  # the learner's step ends (or fails) before anything else happens
            if pending is not None:
                with timed(timings, "learn_wait"):
                    learn, timings["learn"] = pending.result()
        if pending is not None:
            _sync(roles, timings)
        return finish(cfg, roles, items, g, learn, timings, time.perf_counter() - t_start)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _metrics(roles, rounds: Rounds, items, learn, stats, timings, wall) -> dict[str, float]:
    """Rewards count from the scored rollouts; errors and lengths from all of them."""
    trajs, scored = rounds.trajs, rounds.scored
    m: dict[str, float] = {}
    rewards = [t.reward for t in scored]
    m["reward/mean"] = fmean(rewards) if rewards else 0.0
    by_domain: dict[str, list[float]] = defaultdict(list)
    for t in scored:
        by_domain[items[t.item_id].domain].append(t.reward)
    for d, rs in sorted(by_domain.items()):
        m[f"reward/{d}"] = fmean(rs)
        m[f"pass_rate/{d}"] = fmean(1.0 if r >= 1.0 else 0.0 for r in rs)
    m["errors/reward"] = float(sum(1 for t in trajs if unscorable(t)))
    m["errors/dropped_rollouts"] = float(len(trajs) - len(scored))
    m["errors/parse"] = float(sum(1 for t in trajs if t.reward_detail.get("error") == "parse"))
    # a rollout that could not be scored (a failed reward actor, a bad request) also comes back
    # with format_ok False: it was never checked, so it counts in errors/reward alone
    m["errors/format"] = float(
        sum(1 for t in trajs if not t.reward_detail.get("format_ok") and not unscorable(t))
    )
    m["errors/degenerate"] = float(
        sum(1 for t in trajs if degenerate.is_degenerate(t.reward_detail.get("detail")))
    )
    m["response/length"] = fmean(len(t.token_ids) for t in trajs) if trajs else 0.0
    m["response/forced_answer_rate"] = (
        fmean(float(t.forced_answer) for t in trajs) if trajs else 0.0
    )
    m["errors/rollout_restarts"] = float(roles.rollout.restarts)
    m["errors/reward_actor_retries"] = float(roles.rewards.retries)
    m["curriculum/groups"] = float(rounds.groups)
    m["curriculum/valid_fraction"] = rounds.valid / max(1, rounds.groups)
    m["curriculum/selected"] = float(len(rounds.selected))
    m["curriculum/filtered"] = float(rounds.filtered)
    m["curriculum/generation_rounds"] = float(rounds.count)
    m["curriculum/expansion_ratio"] = float(stats["expansion_ratio"])
    m["curriculum/expansion_ema"] = float(stats["expansion_ema"])
    for tier, count in stats["tiers"].items():
        m[f"curriculum/tier/{tier}"] = float(count)
    for tier, rate in stats["tier_pass_rate"].items():
        m[f"pass_rate/tier/{tier}"] = rate
    for name, rate in stats.get("subcategory_pass_rate", {}).items():
        m[f"pass_rate/subcategory/{name}"] = rate
    for key in ("loss", "tokens", "clipped", "grad_norm", "lr", "zero_advantage_samples"):
        if isinstance(learn.get(key), (int, float)):
            m[key] = float(learn[key])
    if learn.get("logprob_mismatch_tokens"):
        # mean |learner - engine| logprob of the sampled tokens: ~0 when both see the same thing
        m["logprob_mismatch"] = learn["logprob_mismatch_sum"] / learn["logprob_mismatch_tokens"]
    tokens = sum(len(t.token_ids) for t in trajs)
    m["generate/tokens_per_s"] = tokens / max(timings.get("generate", 0.0), 1e-9)
    for phase in PHASES:
        m[f"time/{phase}"] = timings.get(phase, 0.0)
    m["time/sync_transfer"] = timings.get("sync_transfer", 0.0)
    m["time/iteration"] = wall
    if "learn_wait" in timings:
        m["time/learn_wait"] = timings["learn_wait"]
    spent = sum(timings.get(p, 0.0) for p in PHASES)
    if "sleep" in timings:  # rollout.sleep_between_iterations: the engines freeing their memory
        m["time/sleep"] = timings["sleep"]
        spent += timings["sleep"]
    m["time/overhead_share"] = max(0.0, wall - spent) / wall
    return m
