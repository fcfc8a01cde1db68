"""Typed configuration: the single source of truth for every option and its default.

YAML files in ``configs/`` only override these defaults. ``load_config`` reads a YAML file,
applies ``--set key=value`` overrides and validates the result; any problem is raised as a
``ConfigError`` that names the offending key and the file it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    model_validator,
)

from rlcs.config_text import ConfigError, apply_overrides, format_errors, read_config_file

Stage = Literal["pretrain", "sft", "rl"]
TaskDomain = Literal["math", "ocr", "grounding", "gui"]  # the synthetic task generators


def _check_range(r: tuple[float, float]) -> tuple[float, float]:
    if not 0.0 <= r[0] <= r[1] <= 1.0:
        raise ValueError(f"a difficulty range must satisfy 0 <= lo <= hi <= 1, got {list(r)}")
    return r


DifficultyRange = Annotated[tuple[float, float], AfterValidator(_check_range)]


class Section(BaseModel):
    """Base for every section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    path: str | None = Field(None, description="HF model directory to start from.")
    tiny: Literal["text", "vlm", "vlm_moe"] | None = Field(
        None,
        description="Build a tiny model of this kind instead of loading `path`: a Llama "
        "(text), GLM-4.1V's architecture (vlm) or GLM-4.5V's mixture of experts (vlm_moe).",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    tiny_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Changes to the tiny model's defaults, e.g. {text: {hidden_size: 256}} for "
        "a VLM (its `text` and `vision` sub-configs) or {hidden_size: 256} for a text model.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if self.path is None and self.tiny is None:
            raise ValueError(
                "set either model.path (an HF directory) or model.tiny (text|vlm|vlm_moe)"
            )
        return self


class SyntheticDataConfig(Section):
    """Generate the run's data with :mod:`rlcs.tasks` instead of reading files."""

    domains: list[TaskDomain] = Field(default_factory=lambda: ["math", "ocr", "grounding", "gui"])
    sizes: dict[Literal["rl_train", "heldout", "sft", "pretrain"], int] = Field(
        default_factory=dict
    )
    text_only: bool = Field(False, description="Put the task in the prompt text; no images.")
    difficulty: DifficultyRange = Field(
        (0.0, 1.0), description="Each example's difficulty knob is drawn uniformly from [lo, hi]."
    )
    domain_difficulty: dict[TaskDomain, DifficultyRange] = Field(
        default_factory=dict,
        description="A [lo, hi] range for some domains instead of `difficulty`: {ocr: [0.4, 0.6]}.",
    )
    seed: int = 0

    def difficulty_of(self, domain: str) -> tuple[float, float]:
        """The difficulty range the domain's examples are drawn from."""
        return tuple(self.domain_difficulty.get(domain, self.difficulty))


class DataConfig(Section):
    train: list[str] = Field(default_factory=list, description="JSONL or Parquet files.")
    synthetic: SyntheticDataConfig | None = Field(
        None,
        description="Build synthetic task data into RUN_DIR/data and use its split for the stage.",
    )
    eval: list[str] = Field(default_factory=list)
    domain_weights: dict[str, float] = Field(
        default_factory=dict, description="Fixed domain proportions; empty means by item count."
    )
    seq_len: int = Field(
        8192,
        gt=0,
        description="Tokens in one packed row of the learner's batches, in every stage; a "
        "pretraining text longer than this is cut; any other document longer than this is an error.",
    )
    pack: bool = True

    @model_validator(mode="after")
    def _weights_positive(self) -> DataConfig:
        for domain, w in self.domain_weights.items():
            if w < 0:
                raise ValueError(f"domain_weights.{domain} must be >= 0, got {w}")
        return self


class RolloutConfig(Section):
    engine: Literal["vllm", "hf"] = "vllm"
    num_workers: int = Field(1, ge=1)
    n: int = Field(8, ge=1, description="Rollouts per prompt (the GRPO group size).")
    temperature: float = Field(1.0, ge=0.0)
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
    cpu_allocator: Literal["tcmalloc", "system"] = Field(
        "tcmalloc",
        description="vLLM CPU engine's malloc: tcmalloc (Debian libtcmalloc-minimal4) reuses "
        "freed pages, which makes a weight reload about 4x faster; falls back to the system's "
        "with a warning when not installed. Ignored on GPU hosts and by the hf engine.",
    )


class RewardConfig(Section):
    num_actors: int = Field(2, ge=1)
    processes_per_actor: int = Field(1, ge=1)
    timeout_s: float = Field(5.0, gt=0.0)
    format: Literal["glm", "bare", "boxed"] = "glm"
    math_rel_tol: float = Field(1e-6, ge=0.0)
    iou_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    gui_partial_credit: bool = False
    custom_domains: dict[str, str] = Field(
        default_factory=dict, description="domain -> 'module:Verifier' import path."
    )
    unscorable: Literal["drop", "zero"] = Field(
        "drop",
        description="A rollout whose reward could not be computed (a timeout, a crash, a "
        "verifier fault; not a wrong or unreadable answer): drop leaves it out of its group, "
        "for the curriculum's evidence and the GRPO update; zero scores it 0 like a wrong answer.",
    )


class CurriculumConfig(Section):
    """RLCS: per-item pass rates, difficulty tiers, tier weights and ratio-EMA expansion.

    Domain proportions are not here: they are ``data.domain_weights``.
    """

    policy: Literal["rlcs", "uniform", "dapo_filter"] = Field(
        "rlcs",
        description="rlcs: tier-weighted + expansion; uniform; dapo_filter: drop 0/1 groups.",
    )
    tier_boundaries: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.7, 0.9],
        description="Pass-rate cut points, from very hard to very easy.",
    )
    tier_names: list[str] | None = Field(
        None, description="One name per tier, hardest first; default very_hard..very_easy."
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
        0.5, ge=0.0, le=1.0, description="A rollout with reward >= this counts as a success."
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

    @model_validator(mode="after")
    def _sorted_boundaries(self) -> CurriculumConfig:
        b = self.tier_boundaries
        if any(not 0.0 < x < 1.0 for x in b) or b != sorted(b) or len(set(b)) != len(b):
            raise ValueError(f"tier_boundaries must be strictly increasing in (0, 1), got {b}")
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
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per iteration.")
    skip_zero_advantage: bool = Field(
        True,
        description="Leave samples of advantage 0 (every sample of a group whose rewards are "
        "equal) out of the learner's passes when no KL or entropy term is on: they add nothing "
        "to the gradient, and the loss is still normalised over the whole batch. Their "
        "learner-vs-engine logprob comparison (logprob_mismatch) is then not made.",
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
    precision: Literal["fp32", "bf16"] = "fp32"
    lr: float = Field(1e-6, gt=0.0)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, ge=0.0)
    global_batch: int = Field(32, ge=1)
    micro_batch: int = Field(1, ge=1)
    steps: int = Field(
        100,
        ge=1,
        description="Optimizer steps for pretrain/SFT; in every stage also where lr_schedule's "
        "decay reaches 0. Unset in RL: the run's optimizer steps, run.iterations x "
        "grpo.mini_batches.",
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
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
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


class RunConfig(Section):
    name: str = Field("run", pattern=r"^[A-Za-z0-9._-]+$")
    root: str = "runs"
    iterations: int = Field(10, ge=1, description="RL iterations.")
    prompts_per_iteration: int = Field(32, ge=1)
    topup_rounds: int = Field(
        3,
        ge=0,
        description="curriculum.policy dapo_filter: at most this many more rounds of fresh "
        "prompts an iteration until prompts_per_iteration valid groups are in hand (DAPO's "
        "dynamic sampling); 0: train on the valid groups of the first round only.",
    )
    save_every: int = Field(10, ge=0)
    keep_checkpoints: int = Field(
        2,
        ge=0,
        description="Learner checkpoints kept on disk, the newest ones (each holds the "
        "optimizer state); 0 keeps every one.",
    )
    export_hf_checkpoints: bool = Field(
        False,
        description="Also write each checkpoint's model in Hugging Face format, to "
        "checkpoints/step_<k>/hf (for `rlcs eval`); removed with its checkpoint.",
    )
    eval_every: int = Field(
        0,
        ge=0,
        description="RL: greedy held-out (data.eval) pass rate every N iterations and at the "
        "end, logged as eval/pass_rate/<domain>; 0 turns it off.",
    )
    eval_samples: int = Field(
        0,
        ge=0,
        description="RL, with eval_every: also this many answers per held-out item at "
        "rollout.temperature, logged as eval/sampled_pass_rate/<domain> (the share that pass) "
        "and eval/pass_at_k/<domain> (items with at least one); 0: greedy only.",
    )
    samples_per_iteration: int = Field(8, ge=0)
    max_wall_s: float | None = Field(
        None,
        gt=0.0,
        description="Stop early where one more RL iteration or learner step (and the "
        "evaluation that would end the run), timed by the last ones, would end past this many "
        "seconds after the run started: the run ends as if done, its last iteration evaluated "
        "and checkpointed, its model exported; --resume goes on. None: no limit.",
    )
    overlap_rollout: bool = Field(
        False,
        description="RL: generate and score the next iteration's rollouts while the learner "
        "trains on this one's, then push the weights (one-step off-policy: rollouts come from "
        "the weights one update behind the learner). Rollout engines and learner work at once "
        "instead of in turn; under cluster.colocate on CPU each takes its own share of the "
        "bundle's cores. Not with rollout.sleep_between_iterations.",
    )
    seed: int = 0


class Config(Section):
    stage: Stage = "rl"
    model: ModelConfig
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    @model_validator(mode="after")
    def _cross_section_defaults_and_checks(self) -> Config:
        """RL's LR horizon defaults to the run's optimizer steps (a decay ends with the run,
        not at an unrelated 100); flash-attention needs CUDA and bf16."""
        lc = self.learner
        if self.stage == "rl" and "steps" not in lc.model_fields_set:
            lc.steps = self.run.iterations * lc.grpo.mini_batches
        flash = lc.attn_implementation.startswith("flash")
        if flash and (self.cluster.device != "cuda" or lc.precision != "bf16"):
            raise ValueError(
                f"learner.attn_implementation={lc.attn_implementation} needs cluster.device=cuda "
                f"and learner.precision=bf16 (got {self.cluster.device} and {lc.precision})"
            )
        if self.run.overlap_rollout and self.rollout.sleep_between_iterations:
            raise ValueError(
                "run.overlap_rollout generates while the learner trains, so the engines cannot "
                "sleep then: set rollout.sleep_between_iterations false (or overlap_rollout false)"
            )
        if flash and lc.grpo.share_prompts:
            raise ValueError("learner.grpo.share_prompts needs attn_implementation sdpa or eager")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.run.root) / self.run.name

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config, apply ``key=value`` overrides, and validate."""
    source = str(path) if path is not None else "<defaults>"
    data = read_config_file(path) if path is not None else {}
    overridden = apply_overrides(data, overrides or [])
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(e, source, overridden)) from None
