"""The sections of the config that configure the roles: rollout engines, reward pool,
curriculum sampler, learner (with GRPO) and the cluster they are placed on. :mod:`rlcs.config`
puts them together with the model, data and run sections into one validated ``Config``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator, model_validator


class Section(BaseModel):
    """Base for every section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RolloutConfig(Section):
    engine: Literal["vllm", "hf"] = "vllm"
    num_workers: int = Field(1, ge=1)
    n: int = Field(8, ge=1, description="Rollouts per prompt (the GRPO group size).")
    temperature: float = Field(
        1.0, description="Sampling temperature, a finite number of at least 0 (0: greedy)."
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="1.0 per the recipe; 0.9 garbles output.")
    max_think_tokens: int = Field(8192, ge=1, description="Thinking budget before force-answering.")
    max_answer_tokens: int = Field(1024, ge=1)
    force_answer: bool = True
    nothink: bool = False
    seed: int = 0
    gpu_memory_utilization: float = Field(
        0.85,
        gt=0.0,
        le=1.0,
        description="vLLM's memory share. On CPU: the share of the NUMA node's memory for the "
        "engine's worker process, its own memory (about 0.6 GiB for a small model) and then "
        "the KV cache. Unused for the KV cache when kv_cache_gib is set.",
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0.0,
        description="vLLM: the KV cache's size in GiB (vLLM's kv_cache_memory_bytes) instead of "
        "what gpu_memory_utilization's share leaves. On CPU it does not depend on the NUMA "
        "node's size or on the worker's own memory, so one value works on every machine.",
    )
    tensor_parallel_size: int = Field(1, ge=1)
    sleep_between_iterations: bool = Field(
        False,
        description="vLLM on GPU: the driver puts the engines to sleep (level 1: weights to CPU "
        "RAM, KV cache freed) while the learner trains, for a colocated learner's memory; the "
        "weight push wakes them. No effect on the HF engine or on CPU.",
    )
    hf_batch_size: int = Field(
        64, ge=1, description="hf engine: sequences generated together (left-padded)."
    )
    logprobs: Literal["raw", "tempered"] = Field(
        "raw",
        description="The logprob the engines report with each sampled token: of the raw "
        "logits ('raw', vLLM's default), or of the distribution sampled from, the logits over "
        "the request's temperature ('tempered'; vLLM's processed_logprobs, which needs top_p "
        "1.0). learner.grpo.old_logprobs=rollout needs the learner's policy distribution.",
    )
    cpu_allocator: Literal["tcmalloc", "system"] = Field(
        "tcmalloc",
        description="vLLM CPU engine's malloc: tcmalloc (Debian libtcmalloc-minimal4), "
        "preloaded into the rollout worker's process, reuses freed pages, which makes a weight "
        "reload about 4x faster; falls back to the system's with a warning when not installed. "
        "Ignored on GPU hosts and by the hf engine.",
    )

    @field_validator("temperature")
    @classmethod
    def _finite_temperature(cls, v: float) -> float:
        if not (math.isfinite(v) and v >= 0.0):  # inf samples uniform noise; NaN poisons logits
            raise ValueError(
                "must be a finite number of at least 0: 0 samples greedily, 1 from the "
                "model's own distribution"
            )
        return v


class RewardConfig(Section):
    num_actors: int = Field(2, ge=1)
    processes_per_actor: int = Field(1, ge=1)
    timeout_s: float = Field(5.0, description="Seconds a verifier may take over one item.")
    format: Literal["glm", "bare", "boxed"] = "glm"
    math_rel_tol: float = Field(1e-6, ge=0.0)
    iou_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    gui_partial_credit: bool = False
    position_shaping: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Training only: a grounding or GUI answer whose position misses scores this "
        "times its closeness to the target (a Gaussian of the offset from the target's centre in "
        "units of its size) instead of 0, so nearer misses rank above far ones in their group; "
        "only a hit scores 1. 0 (the default) is the recipe's binary rule; held-out evaluation "
        "and grading always score without it. Keep it below curriculum.success_threshold.",
    )
    max_repetition: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="glm format: thinking whose 4-word phrases repeat earlier ones in more than "
        "this share is degenerate (scored 0, a format error); 1 turns the check off.",
    )
    max_language_mix: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="glm format: thinking with more than this share of its words outside its "
        "main script (Latin, CJK, ...) is degenerate (scored 0, a format error); 1 turns the "
        "check off.",
    )
    custom_domains: dict[str, str] = Field(
        default_factory=dict, description="domain -> 'module:Verifier' import path."
    )
    unscorable: Literal["drop", "zero"] = Field(
        "drop",
        description="A rollout whose reward could not be computed (a timeout, a crash, a "
        "verifier fault; not a wrong or unreadable answer): drop leaves it out of its group, "
        "for the curriculum's evidence and the GRPO update; zero scores it 0 like a wrong answer.",
    )

    @field_validator("timeout_s")
    @classmethod
    def _finite_timeout(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0.0):
            raise ValueError(
                "must be a finite number of seconds above 0: 0 would time out every item, and "
                "inf let a hung verifier hold its batch for ever"
            )
        return v


#: an item's tier is a uint8, and the boundaries make len + 1 tiers besides ``unseen``
MAX_TIER_BOUNDARIES = 254


class CurriculumConfig(Section):
    """RLCS: per-item pass rates, difficulty tiers, tier weights and ratio-EMA expansion.

    Domain proportions are not here: they are ``data.domain_weights``.
    """

    policy: Literal["rlcs", "uniform", "dapo_filter"] = Field(
        "rlcs",
        description="rlcs: tier-weighted + expansion; uniform; dapo_filter: drop the groups "
        "whose rollouts all pass or all fail (a pass: a reward of at least "
        "curriculum.success_threshold, so a group of partial rewards all below it is dropped).",
    )
    tier_boundaries: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.7, 0.9],
        description="Pass-rate cut points, from very hard to very easy.",
    )
    tier_names: list[str] | None = Field(
        None,
        description="One name per tier, hardest first; default very_hard, hard, medium, easy, "
        "very_easy for five tiers, else tier0, tier1, ...",
    )
    pass_rate_ema: float = Field(0.5, gt=0.0, le=1.0, description="Weight of the newest group.")
    offline_prior_weight: float = Field(
        4.0, ge=0.0, description="Pseudo-attempts given to the dataset's offline difficulty."
    )
    subcategory_prior: bool = Field(
        False,
        description="An item never drawn and without offline grade takes the recent pass rate "
        "of its subcategory (meta.subcategory; its domain if none), and so its tier.",
    )
    success_threshold: float = Field(
        0.5, description="A rollout with reward >= this counts as a success; in (0, 1]."
    )
    weight_floor: float = Field(
        0.05, ge=0.0, le=1.0, description="Least per-item tier weight, so no tier starves."
    )
    weight_power: float = Field(
        2.0, gt=0.0, description="Tier weight = (4 p (1 - p)) ** power, p the tier's pass rate."
    )
    tier_rate_ema: float = Field(
        0.5, gt=0.0, le=1.0, description="Weight of the newest iteration in a tier's pass rate."
    )
    unseen_weight: float = Field(
        1.0, ge=0.0, description="Per-item weight of items with no evidence at all."
    )
    expansion_ema: float = Field(0.5, gt=0.0, le=1.0, description="Weight of the newest ratio.")
    expansion_cap: float = Field(4.0, ge=1.0)
    expansion_surplus: Literal["drop", "keep_valid"] = Field(
        "drop", description="Groups beyond the batch: drop them, or keep the valid ones too."
    )
    keep_snapshots: int = Field(2, ge=1, description="Saved states kept in RUN_DIR/curriculum.")
    seed: int = 0

    @field_validator("success_threshold")
    @classmethod
    def _threshold_above_zero(cls, v: float) -> float:
        if v > 1.0:
            raise ValueError(
                "must be at most 1: no reward is above 1, so no rollout would count as a "
                "success; give a reward in (0, 1], e.g. 0.5"
            )
        if not v > 0.0:  # NaN too
            raise ValueError(
                "must be above 0: every reward is at least 0, so every rollout would count as "
                "a success; give a reward in (0, 1], e.g. 0.5"
            )
        return v

    @model_validator(mode="after")
    def _sorted_boundaries(self) -> CurriculumConfig:
        b = self.tier_boundaries
        if any(not 0.0 < x < 1.0 for x in b) or b != sorted(b) or len(set(b)) != len(b):
            raise ValueError(f"tier_boundaries must be strictly increasing in (0, 1), got {b}")
        if len(b) > MAX_TIER_BOUNDARIES:
            raise ValueError(
                f"tier_boundaries: at most {MAX_TIER_BOUNDARIES} cut points (each item's tier, "
                f"the extra 'unseen' one included, is kept in one byte), got {len(b)}"
            )
        if self.tier_names is not None:
            if len(self.tier_names) != len(b) + 1:
                raise ValueError(
                    f"tier_names needs {len(b) + 1} names for {len(b)} boundaries, "
                    f"got {len(self.tier_names)}"
                )
            if "unseen" in self.tier_names or len(set(self.tier_names)) != len(self.tier_names):
                raise ValueError("tier_names must be distinct and must not use 'unseen'")
        return self


class GRPOConfig(Section):
    eps_low: float = Field(0.2, ge=0.0)
    eps_high: float = Field(0.28, ge=0.0)
    loss_agg: Literal["sample", "token"] = "sample"
    std_normalize: bool = True
    negative_scale: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Multiplies the advantage of every rollout scored below its group's mean: "
        "1 is GRPO, 0 reinforces only a group's better rollouts (docs/learner.md).",
    )
    kl_coef: float = Field(0.0, ge=0.0)
    entropy_coef: float = Field(0.0, ge=0.0)
    mini_batches: int = Field(
        1, ge=1, description="Optimizer steps per pass over an iteration's trajectories."
    )
    epochs: int = Field(
        1,
        ge=1,
        description="Passes over each iteration's trajectories (PPO epochs), each of "
        "grpo.mini_batches optimizer steps; past the first, the clipped ratio is taken against "
        "the logprobs the learner computed before its first step.",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Leave samples of advantage 0 (every sample of a group whose rewards are "
        "equal) out of the learner's passes when no KL or entropy term is on: they add nothing "
        "to the gradient, and the loss is still normalised over the whole batch. Their "
        "learner-vs-engine logprob comparison (logprob_mismatch) is then not made.",
    )
    old_logprobs: Literal["recompute", "rollout"] = Field(
        "recompute",
        description="Where the clipped ratio's old logprobs come from when an iteration makes "
        "more than one optimizer step (mini_batches or epochs above 1): a forward pass of the "
        "learner over the batch before its first step ('recompute'), or the rollouts' own, "
        "as the engine reported them ('rollout'), which saves that pass. The engine's "
        "numerics then enter the ratio (logprob_mismatch shows by how much), and its logprobs "
        "must be of the policy's distribution: rollout.logprobs 'tempered' with "
        "tempered_logprobs at a temperature other than 1. With one step an iteration the "
        "update is on-policy and neither is needed.",
    )
    tempered_logprobs: bool = Field(
        True,
        description="Policy logprobs from the logits over rollout.temperature: the distribution "
        "the engine sampled from. False trains on the raw (temperature 1) distribution.",
    )
    share_prompts: bool = Field(
        False,
        description="Run each group's prompt and images once per learner pass, its rollouts "
        "continuing it under one attention mask (same logprobs, fewer tokens; sdpa or eager).",
    )
    group_filter: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'module:function' called as f(item, rollouts, **group_filter_options) on "
        "every scored group; a group it returns False for is still evidence for the curriculum "
        "but is not trained on (rlcs.group_filters:no_truncated drops groups with a cut-off "
        "rollout).",
    )
    group_filter_options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for group_filter."
    )


class LearnerConfig(Section):
    num_ranks: int = Field(1, ge=1)
    zero_stage: int = Field(2, ge=0, le=3)
    precision: Literal["fp32", "bf16", "bf16-mixed"] = Field(
        "fp32",
        description="fp32; bf16: bf16 weights (DeepSpeed keeps fp32 ones for the optimizer); "
        "bf16-mixed: fp32 weights with the matmuls in bf16 under torch.autocast (DeepSpeed's "
        "torch_autocast), the logits kept in fp32. Once a checkpoint exists --resume keeps it, "
        "except between fp32 and bf16-mixed (the same fp32 checkpoint).",
    )
    lr: float = Field(1e-6, gt=0.0)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, ge=0.0)
    global_batch: int = Field(
        32,
        ge=1,
        description="Pretraining and SFT: examples an optimizer step. RL's batch is "
        "run.prompts_per_iteration groups of rollout.n rollouts (over grpo.mini_batches steps, "
        "grpo.epochs times).",
    )
    micro_batch: int = Field(1, ge=1)
    steps: int = Field(
        100,
        ge=1,
        description="Optimizer steps for pretrain/SFT; in every stage also where lr_schedule's "
        "decay reaches 0. Unset in RL: the run's optimizer steps, run.iterations x "
        "grpo.mini_batches x grpo.epochs.",
    )
    freeze: list[str] = Field(
        default_factory=list,
        description="Parameter-name prefixes kept frozen, e.g. ['model.visual'] for a fixed "
        "vision tower; each must match at least one parameter.",
    )
    lr_groups: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description="Learning rates by parameter-name prefix, e.g. {'model.visual': 5e-5} for "
        "a vision tower that needs a lower rate than the language model; the schedule scales "
        "every group alike. Each prefix must match at least one trainable parameter.",
    )
    attn_implementation: Literal["sdpa", "flash_attention_2", "eager"] = Field(
        "sdpa",
        description="The learner's attention kernel. sdpa: a dense block-diagonal mask per "
        "packed row (CPU and GPU). flash_attention_2: flash-attn's variable-length kernel, each "
        "packed document attended alone at the cost of its own length (CUDA, bf16, the "
        "flash-attn package on the learner's nodes). eager: plain PyTorch, for debugging.",
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)


class ClusterConfig(Section):
    address: str | None = Field(
        None,
        description="Ray address to join; None joins $RAY_ADDRESS (set by `ray job submit`), "
        "else starts a new local instance (never one already running on the machine).",
    )
    device: Literal["cpu", "cuda"] = "cpu"
    num_nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0)
    learner_cpus_per_rank: float = Field(1.0, ge=0.0)
    learner_gpus_per_rank: float = Field(0.0, ge=0.0)
    rollout_cpus_per_worker: float = Field(1.0, ge=0.0)
    rollout_gpus_per_worker: float = Field(
        0.0, ge=0.0, description="GPUs per rollout engine: its tensor-parallel size on GPU hosts."
    )
    reward_cpus_per_actor: float = Field(1.0, ge=0.0)
    colocate: bool = Field(
        False,
        description="Learner rank i and rollout engine i share one bundle and take turns on it: "
        "half its GPUs each, and each runs as many CPU threads as the bundle has CPUs.",
    )
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK",
        description="Ray's strategy for each role's placement group: how the learner's ranks are "
        "placed among themselves, and the rollout engines among themselves (the reward actors "
        "are always spread). It does not put two roles on one node: cluster.colocate or "
        "cluster.role_resources do.",
    )
    role_resources: dict[Literal["learner", "rollout", "reward"], dict[str, float]] = Field(
        default_factory=dict,
        description="Extra custom resources per role's bundles, to pin a role to labelled nodes.",
    )
    weight_sync: Literal["cpu_bytes", "shm", "nccl", "cuda_ipc"] = "cpu_bytes"
    weight_sync_bucket_mb: int = Field(256, ge=1)
    ship_images: bool = Field(
        False,
        description="The driver reads the images of each batch it sends to the rollout "
        "engines and sends them inside the items, so that only the driver's node needs the "
        "data files (for nodes that share no filesystem); off, each engine opens the paths.",
    )
