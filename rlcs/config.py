"""Typed configuration: the single source of truth for every option and its default.

YAML files in ``configs/`` only override these defaults. ``load_config`` reads a YAML file,
applies ``--set key=value`` overrides and validates the result; any problem is raised as a
``ConfigError`` that names the offending key and the file it came from.

The model, data and run sections and the whole ``Config`` with its cross-section checks are
here; the sections of the roles (rollout, reward, curriculum, learner, cluster) are in
:mod:`rlcs.config_roles` and importable from here too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    Field,
    NonNegativeInt,
    ValidationError,
    field_validator,
    model_validator,
)

from rlcs.config_roles import (
    ClusterConfig,
    CurriculumConfig,
    LearnerConfig,
    RewardConfig,
    RolloutConfig,
    Section,
)
from rlcs.config_text import ConfigError, apply_overrides, format_errors, read_config_file

Stage = Literal["pretrain", "sft", "rl"]
TaskDomain = Literal["math", "ocr", "grounding", "gui"]  # the synthetic task generators
#: the generators that can write their task as text (``rlcs.tasks.TEXT_DOMAINS``)
TEXT_TASK_DOMAINS = ("math", "ocr")


def _check_range(r: tuple[float, float]) -> tuple[float, float]:
    if not 0.0 <= r[0] <= r[1] <= 1.0:
        raise ValueError(f"a difficulty range must satisfy 0 <= lo <= hi <= 1, got {list(r)}")
    return r


DifficultyRange = Annotated[tuple[float, float], AfterValidator(_check_range)]


def _folder_name(name: str) -> str:
    if name in (".", ".."):  # the root itself, or its parent, would be the run's directory
        raise ValueError(f"{name!r} is no folder of its own under run.root; name the run")
    return name


RunName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$"), AfterValidator(_folder_name)]

#: A file or folder path; a leading ``~`` is the user's home, as in a shell. Left as written, a
#: ``run.root`` of ``~/runs`` (quoted, or in a YAML file) made a folder named ``~`` in the
#: working directory.
UserPath = Annotated[str, AfterValidator(os.path.expanduser)]


class ModelConfig(Section):
    path: UserPath | None = Field(None, description="HF model directory to start from.")
    tiny: Literal["text", "vlm", "vlm_moe"] | None = Field(
        None,
        description="Build a tiny model of this kind when `path` is unset: a Llama (text), "
        "GLM-4.1V's architecture (vlm) or GLM-4.5V's mixture of experts (vlm_moe). A set `path` "
        "wins, so a tiny config starts from a checkpoint with --set model.path=DIR.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="The rollout engines' (and evaluations') weights, and a built tiny model's; "
        "the learner trains in learner.precision. On CPU the HF engine keeps attention and its "
        "KV cache in fp32 under bfloat16 weights (docs/rollout.md).",
    )
    tiny_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Changes to the tiny model's defaults, e.g. {text: {hidden_size: 256}} for "
        "a VLM (its `text` and `vision` sub-configs) or {hidden_size: 256} for a text model.",
    )
    tokenizer_merges: int = Field(
        0,
        ge=0,
        description="BPE merges a tiny model's tokenizer learns before the model is built, from "
        "the texts of `tokenizer_corpus` (or of the stage's own training data): words and "
        "punctuation runs become single tokens, digits stay one token each. 0 keeps it "
        "byte-level. Read only where the tiny model is built.",
    )
    tokenizer_corpus: list[UserPath] = Field(
        default_factory=list,
        description="JSONL files whose rows' text, prompt and response fields the tokenizer's "
        "merges are learnt from; empty: the stage's training files.",
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
    sizes: dict[Literal["rl_train", "heldout", "sft", "pretrain"], NonNegativeInt] = Field(
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
    heldout: Literal["drawn", "apart"] = Field(
        "drawn",
        description="How the held-out split is drawn: like the others ('drawn'; at a low "
        "difficulty most of its tasks then also occur in training, and for math and OCR often "
        "the very image), or from one task in five that the training splits never hold "
        "('apart': the held-out figures then measure unseen tasks).",
    )

    @model_validator(mode="after")
    def _domains_it_can_build(self) -> SyntheticDataConfig:
        """Checked here, before the run directory is made: the generators would refuse these
        only once the build began."""
        if not self.domains:
            raise ValueError("domains is empty: name at least one of math, ocr, grounding, gui")
        if repeated := sorted({d for d in self.domains if self.domains.count(d) > 1}):
            raise ValueError(f"domains names {', '.join(repeated)} more than once")
        if self.text_only and (bad := [d for d in self.domains if d not in TEXT_TASK_DOMAINS]):
            raise ValueError(
                f"text_only writes each task into its prompt, which only "
                f"{' and '.join(TEXT_TASK_DOMAINS)} can do, not {', '.join(bad)}: leave "
                f"{', '.join(bad)} out of domains, or set text_only false (for a vision model)"
            )
        return self

    def difficulty_of(self, domain: str) -> tuple[float, float]:
        """The difficulty range the domain's examples are drawn from."""
        return tuple(self.domain_difficulty.get(domain, self.difficulty))


class DataConfig(Section):
    train: list[UserPath] = Field(default_factory=list, description="JSONL or Parquet files.")
    synthetic: SyntheticDataConfig | None = Field(
        None,
        description="Build synthetic task data into RUN_DIR/data and use its split for the stage.",
    )
    eval: list[UserPath] = Field(
        default_factory=list,
        description="RL: held-out items for run.eval_every (pretraining and SFT read none).",
    )
    domain_weights: dict[str, float] = Field(
        default_factory=dict,
        description="RL: fixed domain proportions of each batch; empty means by item count.",
    )
    multiple_choice: Literal["fill_in", "letter"] = Field(
        "fill_in",
        description="RL, evaluation and grading: how an item with choices is asked. fill_in "
        "(the recipe's): the prompt alone, answered by the right option's text, so that a "
        "guess among the letters earns nothing. letter: the options listed under the prompt, "
        "answered by the letter, for questions that need their options to make sense.",
    )
    seq_len: int = Field(
        8192,
        gt=0,
        description="Tokens in one packed row of the learner's batches, in every stage; a "
        "pretraining text longer than this is cut; any other document longer than this is an error.",
    )
    pack: bool = True
    image_check: Literal["decode", "header", "off"] = Field(
        "decode",
        description="How every image of the stage's data is checked when it loads, before the "
        "run starts. decode: its pixels are read, as training will (a damaged file stops the "
        "load). header: only its format and size (a missing file, a file that is no image and "
        "bad base64 still stop the load; a file cut short in its pixel data stops the run at "
        "the step that draws it), for corpora too large to decode twice. off: nothing is "
        "checked; a bad image stops the run where it is drawn. A progress bar shows over "
        "1000 rows with images.",
    )

    @field_validator("image_check", mode="before")
    @classmethod
    def _off_as_yaml_reads_it(cls, v: Any) -> Any:
        """YAML reads a bare ``off`` as false (and ``on`` as true)."""
        return {False: "off", True: "decode"}.get(v, v) if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _weights_positive(self) -> DataConfig:
        for domain, w in self.domain_weights.items():
            if not (w >= 0 and math.isfinite(w)):
                raise ValueError(f"domain_weights.{domain} must be a finite number >= 0, got {w}")
        if self.domain_weights and not sum(self.domain_weights.values()) > 0:
            # every domain, named or not, would weigh 0: each batch would be drawn from nothing
            raise ValueError(
                f"domain_weights are all 0 ({self.domain_weights}): give some domain a weight > 0"
            )
        return self

    @model_validator(mode="after")
    def _files_or_synthetic(self) -> DataConfig:
        """A stage reads the synthetic split when data.synthetic is set, so files given beside
        it would be left unread without a word."""
        given = [k for k in ("train", "eval") if getattr(self, k)]
        if self.synthetic is not None and given:
            names = " and ".join(f"data.{k}" for k in given)
            raise ValueError(
                f"{names} and data.synthetic are both set, and a stage with data.synthetic "
                f"reads only the data it builds: to train on your files, also set "
                f"data.synthetic=null (--set data.synthetic=null); else drop {names}"
            )
        return self


class RunConfig(Section):
    name: RunName = "run"
    root: UserPath = "runs"
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
    eval_before_train: bool = Field(
        False,
        description="RL, with eval_every: also evaluate the starting model before the first "
        "iteration, logged as step 0: the baseline the held-out curves of the report and the "
        "dashboard start from. A resumed run keeps the step 0 it logged.",
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

    @model_validator(mode="after")
    def _evaluation_options_need_eval_every(self) -> RunConfig:
        """eval_before_train and eval_samples qualify the held-out evaluation; without
        eval_every there is none, and they would silently do nothing."""
        wanted = ["run.eval_before_train=true"] if self.eval_before_train else []
        if self.eval_samples:
            wanted.append(f"run.eval_samples={self.eval_samples}")
        if wanted and not self.eval_every:
            raise ValueError(
                f"{' and '.join(wanted)} qualify the held-out evaluation, but run.eval_every "
                "is 0 (no evaluation): set run.eval_every to N to evaluate every N iterations "
                "and at the end"
            )
        return self


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
            lc.steps = self.run.iterations * lc.grpo.mini_batches * lc.grpo.epochs
            lc.model_fields_set.discard("steps")  # still derived: see ``resolved``
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
        if self.stage == "rl" and self.rollout.n < 2:
            raise ValueError(
                f"rollout.n is {self.rollout.n}, but stage rl trains on GRPO groups: a group of "
                "one rollout is its own mean, so its advantage is always 0 and nothing is "
                "learnt; give rollout.n of at least 2 (8 by default)"
            )
        if self.stage == "rl" and self.rollout.temperature == 0.0:
            raise ValueError(
                "rollout.temperature is 0, but stage rl trains on GRPO groups: greedy rollouts "
                "of a prompt are all one answer, so every advantage is 0 and nothing is learnt; "
                "sample (1.0 per the recipe; held-out evaluations stay greedy)"
            )
        shaping = self.reward.position_shaping
        if shaping and shaping >= self.curriculum.success_threshold:
            raise ValueError(
                f"reward.position_shaping={shaping:g} reaches curriculum.success_threshold="
                f"{self.curriculum.success_threshold:g}: a shaped miss would count as a success "
                "in the curriculum's pass rates; keep it below the threshold"
            )
        if shaping and self.reward.gui_partial_credit:
            raise ValueError(
                "reward.position_shaping and reward.gui_partial_credit do not go together: "
                "choose one (both score a wrong GUI position above 0)"
            )
        self._check_old_logprobs()
        if flash and lc.grpo.share_prompts:
            raise ValueError("learner.grpo.share_prompts needs attn_implementation sdpa or eager")
        return self

    def _check_old_logprobs(self) -> None:
        """Rollout logprobs as PPO's old logprobs must be of the distribution the learner's
        policy is: tempered exactly when the learner tempers (at a temperature other than 1)."""
        grpo, ro = self.learner.grpo, self.rollout
        if ro.logprobs == "tempered" and ro.top_p < 1.0:
            raise ValueError(
                f"rollout.logprobs=tempered with rollout.top_p={ro.top_p:g}: vLLM's processed "
                "logprobs are then renormalised over the nucleus, the HF engine's and the "
                "learner's are not; use top_p 1.0 (the recipe's) or rollout.logprobs=raw"
            )
        if grpo.old_logprobs != "rollout" or ro.temperature in (0.0, 1.0):
            return
        want = "tempered" if grpo.tempered_logprobs else "raw"
        if ro.logprobs != want:
            policy = (
                f"the logits over rollout.temperature={ro.temperature:g}"
                if grpo.tempered_logprobs
                else "the raw logits (learner.grpo.tempered_logprobs is false)"
            )
            raise ValueError(
                f"learner.grpo.old_logprobs=rollout takes the rollouts' logprobs as the policy's "
                f"old logprobs, and the policy is {policy}, but the engines report "
                f"rollout.logprobs={ro.logprobs}: set rollout.logprobs={want} (or "
                "learner.grpo.old_logprobs=recompute)"
            )

    @property
    def run_dir(self) -> Path:
        return Path(self.run.root) / self.run.name

    def resolved(self) -> dict[str, Any]:
        """Every setting, as ``RUN_DIR/config.yaml`` holds it, less RL's ``learner.steps``
        where it is derived from ``run.iterations``: a run resumed from its config.yaml with
        more iterations derives it anew, so a decaying learning rate ends with that run."""
        out = self.model_dump(mode="json")
        if self.stage == "rl" and "steps" not in self.learner.model_fields_set:
            del out["learner"]["steps"]
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.resolved(), sort_keys=False)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config, apply ``key=value`` overrides, and validate."""
    source = str(path) if path is not None else "<defaults>"
    data = read_config_file(path) if path is not None else {}
    overridden = apply_overrides(data, overrides or [])
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(e, source, overridden, Config)) from None
