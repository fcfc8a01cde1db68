"""``RolloutWorker``: a Ray actor that turns items into scored-ready trajectories.

It renders each item's chat prompt once (text and images, ``/nothink`` if configured), samples
``n`` seeded rollouts per item, and runs the think/answer budget logic of
:mod:`rlcs.prompts` over whichever engine it holds. Rollouts that exhaust the thinking budget
without ``</think>`` get ``</think><answer>`` appended and continue for the answer budget
(``forced_answer=True``). The two inserted tokens get logprob 0.0: they were chosen with
certainty by the worker, not sampled, and the trajectory names their places
(``forced_positions``) so that a learner leaves them out of the loss.

On vLLM that takes two passes (the second for the rollouts that need one); the HF engine
applies the same :class:`~rlcs.prompts.BudgetRule` inside one pass.
"""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path
from typing import Any

import ray

from actors.rollout.engine import GenRequest, GenResult
from rewards.extract import opened_think
from rlcs.config import RolloutConfig
from rlcs.data import Item, Trajectory
from rlcs.images import decode_image
from rlcs.prompts import (
    Budget,
    BudgetRule,
    force_answer_ids,
    plan_continuation,
    render_prompt,
    think_close_id,
)


def request_seed(seed: int, step: int, item_id: str, k: int) -> int:
    """A stable seed per (run seed, step, item, sample), independent of batch composition."""
    return zlib.crc32(f"{seed}:{step}:{item_id}:{k}".encode()) & 0x7FFFFFFF


class RolloutWorkerImpl:
    """The worker without Ray, so it can also run in-process (benchmarks, debugging)."""

    def __init__(
        self,
        model_path: str,
        rollout: RolloutConfig | dict[str, Any] | None = None,
        dtype: str = "float32",
        worker_index: int = 0,
        **engine_kwargs: Any,
    ):
        from transformers import AutoTokenizer

        from rlcs.tokenizer import stop_token_ids

        self.cfg = (
            RolloutConfig.model_validate(rollout or {})
            if not isinstance(rollout, RolloutConfig)
            else rollout
        )
        self.model_path = str(model_path)
        self.worker_index = worker_index
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.stop_ids = stop_token_ids(self.tokenizer)
        self.force_ids = force_answer_ids(self.tokenizer)
        self.think_close = think_close_id(self.tokenizer)
        self.budget = Budget(
            self.cfg.max_think_tokens,
            self.cfg.max_answer_tokens,
            self.cfg.force_answer,
            self.cfg.nothink,
        )
        self.rule = BudgetRule(self.budget, self.think_close, tuple(self.force_ids))
        self._step = 0
        common = dict(stop_ids=self.stop_ids, dtype=dtype, logprobs=self.cfg.logprobs)
        if self.cfg.engine == "vllm":
            from actors.rollout.vllm_engine import VLLMEngine

            self.engine = VLLMEngine(
                self.model_path,
                seed=self.cfg.seed,
                gpu_memory_utilization=self.cfg.gpu_memory_utilization,
                kv_cache_gib=self.cfg.kv_cache_gib,
                tensor_parallel_size=self.cfg.tensor_parallel_size,
                sleep_mode=self.cfg.sleep_between_iterations,
                cpu_allocator=self.cfg.cpu_allocator,
                **common,
                **engine_kwargs,
            )
        else:
            from actors.rollout.hf_engine import HFEngine

            self.engine = HFEngine(
                self.model_path, batch_size=self.cfg.hf_batch_size, **common, **engine_kwargs
            )

    # --- generation -------------------------------------------------------------------------

    def generate(
        self,
        items: list[Item | dict[str, Any]],
        n: int | None = None,
        step: int | None = None,
        base_dir: str | None = None,
        temperature: float | None = None,
    ) -> list[Trajectory]:
        """``n`` rollouts per item (default ``rollout.n``), item by item, in input order.

        ``step`` seeds the batch (default: a counter of calls); ``temperature`` overrides the
        config's for this call (0 is greedy, e.g. for evaluation). Image paths are relative to
        ``base_dir`` (the dataset's folder).
        """
        t0 = time.perf_counter()
        temp = self.cfg.temperature if temperature is None else temperature
        items = [it if isinstance(it, Item) else Item.model_validate(it) for it in items]
        n = n or self.cfg.n
        if step is None:
            step, self._step = self._step, self._step + 1
        base = Path(base_dir) if base_dir else Path.cwd()
        one_pass = getattr(self.engine, "applies_budget", False)
        first_tokens = self.rule.max_tokens if one_pass else self.budget.first_pass_tokens
        reqs: list[GenRequest] = []
        owners: list[str] = []
        heads: list[str] = []
        for item in items:
            images = [decode_image(ref, base) for ref in item.images]
            text = render_prompt(item, self.tokenizer, nothink=self.cfg.nothink)
            ids, mm = self.engine.encode(text, images)
            # a think block the prompt opens (GLM's /nothink: "<think></think>") is part of
            # the response the verifiers read: without it every such answer fails the format
            heads += [opened_think(text)] * n
            for k in range(n):
                seed = request_seed(self.cfg.seed, step, item.id, k)
                reqs.append(
                    GenRequest(ids, first_tokens, seed, text, images, mm,
                               temperature=temp, top_p=self.cfg.top_p)
                )  # fmt: skip
                owners.append(item.id)
        t1 = time.perf_counter()
        if one_pass:  # the engine applies the budgets itself: no second prefill
            results, t2 = self.engine.generate(reqs, rule=self.rule), time.perf_counter()
        else:
            results, t2 = self._two_passes(reqs, temp)
        t3 = time.perf_counter()
        timings = {"render_s": t1 - t0, "first_pass_s": t2 - t1, "second_pass_s": t3 - t2,
                   "batch_s": t3 - t0}  # fmt: skip
        return [
            Trajectory(
                item_id=item_id,
                response=head + self.tokenizer.decode(res.token_ids, skip_special_tokens=True),
                token_ids=list(res.token_ids),
                logprobs=list(res.logprobs),
                finish_reason=res.finish_reason,
                forced_answer=res.forced_answer,
                prompt_token_ids=list(res.prompt_ids),
                forced_positions=list(res.forced_positions),
                timings=dict(timings),
            )
            for item_id, head, res in zip(owners, heads, results, strict=True)
        ]

    def _two_passes(self, reqs: list[GenRequest], temp: float) -> tuple[list[GenResult], float]:
        """The thinking budget's pass, then one batch continuing the rollouts that need it
        (``plan_continuation``); returns the joined results and when the first pass ended."""
        first = self.engine.generate(reqs)
        t2 = time.perf_counter()
        second_reqs, second_of, plans = [], {}, {}
        for i, (req, res) in enumerate(zip(reqs, first, strict=True)):
            cont = plan_continuation(
                res.token_ids, res.finish_reason, self.budget, self.think_close, self.force_ids
            )
            if cont is None:
                continue
            extra = res.token_ids + list(cont.append_ids)
            prompt_ids = res.prompt_ids if req.images and not req.mm_inputs else req.prompt_ids
            second_of[i] = len(second_reqs)
            plans[i] = cont
            second_reqs.append(
                GenRequest(
                    prompt_ids,
                    cont.max_tokens,
                    req.seed + 1,
                    req.prompt_text,
                    req.images,
                    req.mm_inputs,
                    extra,
                    temperature=temp,
                    top_p=self.cfg.top_p,
                )
            )
        second = self.engine.generate(second_reqs)
        joined = []
        for i, res in enumerate(first):
            if i not in second_of:
                joined.append(res)
                continue
            cont, res2 = plans[i], second[second_of[i]]
            appended = range(len(res.token_ids), len(res.token_ids) + len(cont.append_ids))
            joined.append(
                GenResult(
                    list(res.token_ids) + list(cont.append_ids) + list(res2.token_ids),
                    list(res.logprobs) + [0.0] * len(cont.append_ids) + list(res2.logprobs),
                    res2.finish_reason,
                    res.prompt_ids,
                    forced_answer=cont.forced,
                    forced_positions=list(appended),
                )
            )
        return joined, t2

    # --- weights ----------------------------------------------------------------------------

    def receive_weights(self, kind: str, payload: Any, version: str) -> int:
        """Stage one bucket (one call per bucket); nothing is live until ``commit_weights``."""
        return self.engine.stage_weights(kind, payload, version)

    def commit_weights(self, version: str) -> dict[str, Any]:
        """Load all staged buckets into the live engine; return engine-side checksums."""
        return self.engine.commit_weights(version)

    def init_weight_group(
        self, kind: str, address: str, port: int, rank_offset: int, world: int
    ) -> None:
        if not hasattr(self.engine, "init_weight_group"):
            raise ValueError(f"the {self.cfg.engine} engine cannot join a {kind} group")
        self.engine.init_weight_group(kind, address, port, rank_offset, world)

    def nccl_gpus(self) -> list[str]:
        """The GPUs (device UUIDs) whose ranks this engine would put into an NCCL weight group;
        raises for an engine that cannot join one."""
        if not hasattr(self.engine, "init_weight_group"):
            raise ValueError(f"the {self.cfg.engine} engine cannot receive weights over nccl")
        uuids = self.engine.gpu_uuids()
        if not uuids:
            raise ValueError("nccl needs a CUDA engine; this engine has no GPU")
        return uuids

    # --- lifecycle --------------------------------------------------------------------------

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.cfg.engine,
            "model": self.model_path,
            "pid": os.getpid(),
            "index": self.worker_index,
            "node": ray.get_runtime_context().get_node_id() if ray.is_initialized() else None,
        }

    def ready(self) -> bool:
        return True


def worker_options(rollout: RolloutConfig | dict[str, Any], **options: Any) -> dict[str, Any]:
    """Ray options of a rollout worker: ``options`` (num_cpus, num_gpus, runtime_env, ...), with
    tcmalloc preloaded into the actor's process where it will run vLLM on CPU.

    vLLM's CPU engine runs inside the worker's process (``vllm_engine.engine_kwargs``), so its
    allocator must be in ``LD_PRELOAD`` when Ray starts that process: with tcmalloc a weight
    reload reuses the previous reload's pages, about 4x faster than glibc's fresh ones
    (``rollout.cpu_allocator``). The library's path is this node's; a node without it at that
    path only warns (the loader's "cannot be preloaded") and runs on the system allocator."""
    from actors.rollout.vllm_engine import find_tcmalloc

    cfg = rollout if isinstance(rollout, RolloutConfig) else RolloutConfig.model_validate(rollout)
    lib = find_tcmalloc()
    on_cpu = not options.get("num_gpus")
    if cfg.engine == "vllm" and on_cpu and cfg.cpu_allocator == "tcmalloc" and lib:
        env = dict(options.get("runtime_env") or {})
        env_vars = dict(env.get("env_vars") or {})
        current = env_vars.get("LD_PRELOAD") or os.environ.get("LD_PRELOAD", "")
        if "tcmalloc" not in current:
            env_vars["LD_PRELOAD"] = f"{lib}:{current}" if current else lib
        options = {**options, "runtime_env": {**env, "env_vars": env_vars}}
    return options


@ray.remote(num_cpus=1)
class RolloutWorker(RolloutWorkerImpl):
    """The Ray actor. Create with ``RolloutWorker.options(num_cpus=..., num_gpus=...).remote(
    model_path, rollout_config)``; the engine is built inside the actor's process."""
